"""Judging and keeping: budgets, the gate's statistics and settings, results, saved runs and their history."""
