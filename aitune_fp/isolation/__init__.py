"""What a candidate must not change (the process, the model, the samples) and how it is put back."""
