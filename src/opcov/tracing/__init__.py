"""Model op sets: build a model, trace the ATen ops it dispatches on a stand-in accelerator."""
