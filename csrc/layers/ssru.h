// The SSRU scan (Kim et al. 2019, as in Marian's decoders):
//   c_t = f_t * c_{t-1} + (1 - f_t) * x_t,  h_t = relu(c_t)
// given proj = [x_t | W_f in_t + b_f] for n consecutive positions (the two projections
// ran as one GEMM). The cell state of every position is kept so a rejected draft can be
// rolled back by truncation alone.
#pragma once

namespace fastdec {

// proj: [n, 2d]; c_prev: [d] state before the first position, or null for c_0 = 0.
// c_out: [n, d] cell states; h_out: [n, d] outputs.
void ssru_scan(const float* proj, int n, int d, const float* c_prev, float* c_out, float* h_out);

}  // namespace fastdec
