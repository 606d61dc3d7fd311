// The row blocking and the entry loops shared by kernels_avx2.cpp and
// kernels_neon.cpp. Included inside `namespace tk { namespace { ... } }`
// after the file's own
//   template <int R, int C, int BITS> void rows(x, w, y, m0, n0, n1);
//     // R rows from m0, columns [n0, n1), C columns a pass
//   template <int BITS> void dequantize_row(wr, w, first_group, o);
// No library templates here (see attention_impl.h).

// Rows 4 at a time, one column a pass; 3 or 2 left: 2 columns a pass; one
// row alone: 4 (independent accumulators).
template <int BITS>
void all_rows(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  int m = 0;
  for (; m + 4 <= x.M; m += 4) rows<4, 1, BITS>(x, w, y, m, n0, n1);
  switch (x.M - m) {
    case 3: rows<3, 2, BITS>(x, w, y, m, n0, n1); break;
    case 2: rows<2, 2, BITS>(x, w, y, m, n0, n1); break;
    case 1: rows<1, 4, BITS>(x, w, y, m, n0, n1); break;
    default: break;
  }
}

inline void qmm_rows(const QuantizedRows& x, const Weights& w, float* y, int n0, int n1) {
  if (w.bits == 4) {
    all_rows<4>(x, w, y, n0, n1);
  } else {
    all_rows<8>(x, w, y, n0, n1);
  }
}

// Columns [n0, n1) dequantized, row n - n0 of `out` (K floats each).
inline void dequantize_columns(const Weights& w, int n0, int n1, float* out) {
  const size_t row_bytes = size_t(w.K) * w.bits / 8, groups = w.K / w.group;
  for (int n = n0; n < n1; ++n) {
    const uint8_t* wr = reinterpret_cast<const uint8_t*>(w.w) + n * row_bytes;
    float* o = out + size_t(n - n0) * w.K;
    if (w.bits == 4) {
      dequantize_row<4>(wr, w, size_t(n) * groups, o);
    } else {
      dequantize_row<8>(wr, w, size_t(n) * groups, o);
    }
  }
}
