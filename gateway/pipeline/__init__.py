"""The message pipeline: the router's edge, a lane per session, the turn, and what a
turn needs on the way out (delivery, streaming) and in (media, PDFs), and the
approval buttons.
"""
