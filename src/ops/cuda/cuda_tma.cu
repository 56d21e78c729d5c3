// Host side of cuda_tma.cuh: TMA descriptors through the driver's cuTensorMapEncodeTiled, found
// once at run time (the runtime's driver entry point; shardtrain does not link libcuda).
#include <cudaTypedefs.h>

#include <mutex>

#include "ops/cuda/cuda_tma.cuh"

namespace shardtrain::cuda_kernels::tma {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static PFN_cuTensorMapEncodeTiled_v12000 function = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &found, 12000, cudaEnableDefault,
                                         &query) == cudaSuccess &&
        query == cudaDriverEntryPointSuccess) {
      function = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(found);
    } else {
      (void)cudaGetLastError();  // not sticky; leave no error for the next check
    }
  });
  return function;
}

// A [batch, seq, heads, head_dim] tensor of `element`-byte values, boxes of `rows` tokens x 128
// bytes of one head, 128-byte swizzle.
bool encode_heads(CUtensorMap& map, CUtensorMapDataType type, uint64_t element, const void* base,
                  int batch, int seq, int heads, int head_dim, int rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function();
  const uint64_t box_columns = wgmma::kSwizzleBytes / element;
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 ||
      head_dim % box_columns != 0 || rows < 1 || rows > 256) {
    return false;
  }
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(seq), static_cast<cuuint64_t>(batch)};
  // Byte strides of dimensions 1..3 (dimension 0 is contiguous).
  const cuuint64_t strides[3] = {head_dim * element, uint64_t(heads) * head_dim * element,
                                 uint64_t(seq) * heads * head_dim * element};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_columns), 1,
                             static_cast<cuuint32_t>(rows), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap encoded;
  const CUresult result =
      encode(&encoded, type, 4, const_cast<void*>(base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) return false;
  map = encoded;
  return true;
}

}  // namespace

bool tensor_map_of_heads(CUtensorMap& map, const void* base, int batch, int seq, int heads,
                         int head_dim, int rows) {
  return encode_heads(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, sizeof(__nv_bfloat16), base, batch,
                      seq, heads, head_dim, rows);
}

bool tensor_map_of_heads_f32(CUtensorMap& map, const void* base, int batch, int seq, int heads,
                             int head_dim, int rows) {
  return encode_heads(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sizeof(float), base, batch, seq, heads,
                      head_dim, rows);
}

bool tensor_map_2d(CUtensorMap& map, const void* base, int64_t rows, int64_t columns,
                   int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function();
  if (encode == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || rows < 1 || columns < 1 ||
      columns % 8 != 0 || box_rows < 1 || box_rows > 256) {
    return false;
  }
  constexpr uint64_t kElement = sizeof(__nv_bfloat16);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(columns), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(columns) * kElement};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(wgmma::kBlockColumns),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  CUtensorMap encoded;
  const CUresult result =
      encode(&encoded, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides,
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) return false;
  map = encoded;
  return true;
}

}  // namespace shardtrain::cuda_kernels::tma
