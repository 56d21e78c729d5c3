#include "model/layers/linear.h"

#include "core/error.h"

namespace shardtrain {

void Linear::base_forward(Ops& ops, Tensor x_NI, Tensor bias_O, Tensor residual_NO,
                          Tensor out_NO) const {
  if (fp8) {
    ops.linear_forward_fp8(x_NI, weight_OI, bias_O, residual_NO, out_NO, fp8_site);
  } else if (residual_NO.defined()) {
    ops.linear_forward_residual(x_NI, weight_OI, residual_NO, out_NO);
  } else {
    ops.linear_forward(x_NI, weight_OI, bias_O, out_NO);
  }
}

void Linear::forward(Ops& ops, Tensor x_NI, Tensor out_NO) const {
  if (!lora.defined()) {
    base_forward(ops, x_NI, bias_O, Tensor(), out_NO);
    return;
  }
  lora.forward(ops, x_NI, bias_O, Tensor(), out_NO);  // out = adapters (+ bias)
  base_forward(ops, x_NI, Tensor(), out_NO, out_NO);  // out += x @ W^T in the epilogue
}

void Linear::forward_residual(Ops& ops, Tensor x_NI, Tensor residual_NO, Tensor out_NO) const {
  SHARDTRAIN_CHECK(!bias_O.defined(), "a residual linear has no bias");
  if (!lora.defined()) {
    base_forward(ops, x_NI, Tensor(), residual_NO, out_NO);
    return;
  }
  lora.forward(ops, x_NI, Tensor(), residual_NO, out_NO);  // out = residual + adapters
  base_forward(ops, x_NI, Tensor(), out_NO, out_NO);
}

void Linear::backward(Ops& ops, const Linear& grad, bool accumulate_grad, Tensor dout_NO,
                      Tensor x_NI, Tensor dx_NI, bool accumulate_dx) const {
  // The adapters first: they write (or add to) dx, and the base's d(x) GEMM adds to it.
  if (lora.defined()) {
    lora.backward(ops, grad.lora, accumulate_grad, dout_NO, x_NI, dx_NI, accumulate_dx);
    accumulate_dx = true;
  }
  // Undefined gradient views tell the backend the weight is frozen (ops/ops.h).
  const Tensor dweight_OI = frozen ? Tensor() : grad.weight_OI;
  const Tensor dbias_O = frozen ? Tensor() : grad.bias_O;
  if (fp8) {
    ops.linear_backward_fp8(dout_NO, x_NI, weight_OI, dx_NI, dweight_OI, dbias_O, accumulate_dx,
                            accumulate_grad, fp8_site);
  } else {
    ops.linear_backward(dout_NO, x_NI, weight_OI, dx_NI, dweight_OI, dbias_O, accumulate_dx,
                        accumulate_grad);
  }
}

}  // namespace shardtrain
