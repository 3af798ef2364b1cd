"""One tune call: the baseline, the gate, the one candidate pipeline and the strategies."""
