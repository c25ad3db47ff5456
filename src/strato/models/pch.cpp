// Anchors the shared precompiled <torch/torch.h>.
