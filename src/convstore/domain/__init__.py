"""The domain: blocks, roles, events and the rules for recording them.

Nothing here knows about storage or providers.
"""
