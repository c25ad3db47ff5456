#pragma once
// ONNX models through OpenCV's DNN module (Debian libopencv-dnn-dev), so an exported model is
// served without libtorch. Registered as Triton's ONNX names (backend "onnxruntime", platform
// "onnxruntime_onnx", file model.onnx) so existing repositories load; the runtime underneath is
// OpenCV's. FP32 inputs and outputs; the config must name them (OpenCV does not report an ONNX
// graph's input names and shapes).

namespace strato::serve {

void register_onnx_backend(int threads);

}  // namespace strato::serve
