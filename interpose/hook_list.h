// Expands interpose/hooks.def into one OVERSUB_EMIT per exported symbol.
//
// The includer defines
//   OVERSUB_EMIT(family, ret, symbol, base, params, args)
// and includes this file (no include guard: it is meant to be read several times).
// symbol is the exported name (cudaMemcpy or cudaMemcpy_ptds), base the name whose
// declaration in cuda_runtime_api.h gives the type (always the plain one: CUDA's
// headers declare the _ptsz/_ptds names only under per-thread-stream macros, and
// the twins share the plain signature). OVERSUB_EMIT is undefined at the end.
//
// This file is also run through the C preprocessor alone (-P) to produce the
// version script and the ABI test's expected-symbols list, so it uses nothing but
// macros.
#define OVERSUB_HOOK(family, variants, ret, name, params, args) \
  OVERSUB_EMIT(family, ret, name, name, params, args)           \
  OVERSUB_VARIANT_##variants(family, ret, name, params, args)
#define OVERSUB_VARIANT_none(family, ret, name, params, args)
#define OVERSUB_VARIANT_ptsz(family, ret, name, params, args) \
  OVERSUB_EMIT(family, ret, name##_ptsz, name, params, args)
#define OVERSUB_VARIANT_ptds(family, ret, name, params, args) \
  OVERSUB_EMIT(family, ret, name##_ptds, name, params, args)

#include "hooks.def"

#undef OVERSUB_HOOK
#undef OVERSUB_VARIANT_none
#undef OVERSUB_VARIANT_ptsz
#undef OVERSUB_VARIANT_ptds
#undef OVERSUB_EMIT
