// Draft acceptance in a verifying step, written once for the CPU engine (model/drafting.cc)
// and the GPU model (cuda/gpu_output.cc): both must accept exactly the same tokens, since
// the proposal heads then run at the accepted position (pyfastdec/backends/base.py: Want's
// proposals, StepOut.accepted).
#pragma once
#include <cstddef>
#include <cstdint>

namespace fastdec {

// tokens [rows, n]: per row the pending token, then draft_lengths[b] (<= n - 1, checked by
// the bindings) drafted tokens; argmax [rows, n]: the verifier's winner after each
// position. accepted[b]: how many drafted tokens in a row equal the winners before them,
// so that the row's state at position b * n + accepted[b] holds the accepted prefix.
inline void accept_drafts(const int32_t* tokens, const int64_t* argmax, const int64_t* draft_lengths, int rows,
                          int n, int64_t* accepted) {
  for (int b = 0; b < rows; ++b) {
    const int32_t* draft = tokens + static_cast<size_t>(b) * n + 1;
    const int64_t* winner = argmax + static_cast<size_t>(b) * n;
    int64_t j = 0;
    while (j < draft_lengths[b] && draft[j] == winner[j]) ++j;
    accepted[b] = j;
  }
}

}  // namespace fastdec
