#pragma once
// Backends that run on libtorch:
//   strato  (platform strato_package): a strato model package (strato-model.json + weights.pt);
//           the config is filled in from the package signature when absent. Input "input" takes
//           pixels scaled to [0, 1] (FP32) or 0..255 (UINT8 when the config says TYPE_UINT8) and
//           is normalised with the package's mean/std; outputs "logits" and "probabilities".
//   pytorch (platform pytorch_libtorch): a TorchScript file model.pt (torch.jit.trace/script),
//           inputs and outputs matched to the config in order, as Triton's PyTorch backend does.

namespace strato::serve {

/// Registers both backends and sets libtorch's intra-op threads (0: one per core).
void register_torch_backends(int intra_op_threads);

}  // namespace strato::serve
