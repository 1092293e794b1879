"""The journal's rules, checked over its records: what a fork verifies before it copies
a history, and what ``loopruntime replay --check`` reports."""
