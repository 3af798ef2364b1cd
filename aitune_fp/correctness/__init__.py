"""Correctness before speed: a candidate's outputs must match eager's, checked leaf by leaf."""
