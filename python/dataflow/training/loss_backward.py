"""Gradients without an optimizer step: forward + loss + backward of an all-resident Llama, run
by the training engine (an executor of the all-resident plan over the model's own blocks,
dataflow.training.ring_training.resident_training), kept per model between calls."""
from ..errors import BadArgumentError
from .ring_training import resident_training


def loss_backward(model, tokens, labels=None, documents=None, accumulate=False, loss_scale=None, stream=0):
    """Forward + loss + backward of `model` into its gradients (added to them with accumulate),
    with no optimizer step; like a Trainer's first step it allocates AdamW's m and v, zeroed.
    loss_scale default 1 / labelled tokens (mean loss). Returns (loss_scale * summed loss,
    number of labelled tokens)."""
    model._host_held("loss_backward")
    if model.config.quantization:
        raise BadArgumentError(f"loss_backward: the model's linear weights are quantized "
                               f"(int{model.config.quantization['bits']}), for inference only")
    packed = model._pack(tokens, labels, documents)
    if loss_scale is None:
        if packed.num_labels == 0:
            raise BadArgumentError("loss_backward: no labelled tokens (every target is -100)")
        loss_scale = 1.0 / packed.num_labels
    model._backward = resident_training(model, (tokens, labels, documents), stream, model._backward)
    model._on(stream)
    chunks = model._backward.chunks(tokens, labels, documents, "loss_backward")
    losses = model._backward.run(chunks, accumulate, loss_scale)
    return model._batch_loss(losses, loss_scale) + model._backward.aux_loss, packed.num_labels
