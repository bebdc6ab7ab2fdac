"""Operator tools the CLI and the gateway share: doctor's checks and backups."""
