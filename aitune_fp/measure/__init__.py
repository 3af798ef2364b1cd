"""The measuring loop: time eager and a candidate, ask the pure decision at each look, stop."""
