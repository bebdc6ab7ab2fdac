"""Admission: who sent an event and whether they get in (intake: bots, redeliveries,
mention gating, the person resolved with their access verdict, the session key).
"""
