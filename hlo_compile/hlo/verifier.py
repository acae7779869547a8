"""Verifier placeholder."""
def verify_module(module):
    return None
