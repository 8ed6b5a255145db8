"""Test helpers that ship with the runtime (importable by the portal's tests)."""
