"""The all-resident oracle of the ring tests: a resident Llama's loss_backward (the executor of
the all-resident plan over the model's own blocks, checked against Hugging Face in test_llama.py)
and then AdamW by that same executor over the gradients it left in the blocks."""


def resident_adamw(model, params, max_grad_norm, step):
    """One AdamW step (Dataflow_AdamW_Params params, clipping at max_grad_norm, 0: none) over
    the gradients of model's last loss_backward; returns the pre-clip gradient norm."""
    executor = model._backward.executor
    executor.apply(params, max_grad_norm, step)
    executor.wait()
    return executor.grad_norm()
