"""One turn of a recursive language model: the DSPy programs, their budgets, child agents and events."""
