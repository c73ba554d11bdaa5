// The translation between CUresult and cudaError_t (Note [Error codes across the
// APIs] in core/error_codes.h).
#include "core/error_codes.h"

#include <gtest/gtest.h>

#include <set>

namespace oversub {
namespace {

TEST(ErrorCodes, CodesOfTheSameMeaningCrossBothWays) {
  EXPECT_EQ(to_runtime_error(CUDA_SUCCESS), cudaSuccess);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_OUT_OF_MEMORY), cudaErrorMemoryAllocation);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_INVALID_VALUE), cudaErrorInvalidValue);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_LAUNCH_FAILED), cudaErrorLaunchFailure);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_ILLEGAL_ADDRESS), cudaErrorIllegalAddress);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_INVALID_CONTEXT), cudaErrorDeviceUninitialized);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_INVALID_HANDLE), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_NOT_READY), cudaErrorNotReady);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED),
            cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(to_driver_error(cudaSuccess), CUDA_SUCCESS);
  EXPECT_EQ(to_driver_error(cudaErrorMemoryAllocation), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(to_driver_error(cudaErrorSharedObjectSymbolNotFound),
            CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND);
  EXPECT_EQ(to_driver_error(cudaErrorUnknown), CUDA_ERROR_UNKNOWN);
}

TEST(ErrorCodes, CodesOnlyOneSideHasBecomeUnknown) {
  // Runtime-only codes.
  for (cudaError_t rc : {cudaErrorInvalidPitchValue, cudaErrorInvalidDevicePointer,
                         cudaErrorInvalidMemcpyDirection, cudaErrorInvalidConfiguration,
                         cudaErrorInsufficientDriver, cudaErrorInvalidDeviceFunction,
                         cudaErrorStartupFailure, cudaErrorApiFailureBase}) {
    EXPECT_EQ(to_driver_error(rc), CUDA_ERROR_UNKNOWN) << rc;
  }
  // Driver-only codes.
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_CONTEXT_ALREADY_CURRENT), cudaErrorUnknown);
  EXPECT_EQ(to_runtime_error(CUDA_ERROR_KEY_ROTATION), cudaErrorUnknown);
  // Numbers neither enum names (a future CUDA's, or garbage).
  EXPECT_EQ(to_runtime_error(static_cast<CUresult>(12345)), cudaErrorUnknown);
  EXPECT_EQ(to_driver_error(static_cast<cudaError_t>(-1)), CUDA_ERROR_UNKNOWN);
}

// Over every number either enum could hold: a code the table knows keeps its number
// both ways and comes back to itself; the rest become unknown.
TEST(ErrorCodes, TheTableRoundTripsAndKeepsNumbers) {
  std::set<int> known;
  for (int n = 0; n <= 11000; ++n) {
    const auto driver = static_cast<CUresult>(n);
    const cudaError_t runtime = to_runtime_error(driver);
    if (runtime == cudaErrorUnknown && n != CUDA_ERROR_UNKNOWN) continue;
    known.insert(n);
    EXPECT_EQ(static_cast<int>(runtime), n) << "driver code " << n;
    EXPECT_EQ(to_driver_error(runtime), driver) << "driver code " << n;
  }
  for (int n = 0; n <= 11000; ++n) {
    const CUresult driver = to_driver_error(static_cast<cudaError_t>(n));
    if (known.count(n) != 0) {
      EXPECT_EQ(static_cast<int>(driver), n) << "runtime code " << n;
    } else {
      EXPECT_EQ(driver, CUDA_ERROR_UNKNOWN) << "runtime code " << n;
    }
  }
  // Every code CUDA 13 names on both sides (99 pairs, success and unknown included).
  EXPECT_EQ(known.size(), 99u);
}

}  // namespace
}  // namespace oversub
