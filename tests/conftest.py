"""Shared test configuration. Helpers' fixtures live in their own test modules."""
