// Expands interpose/driver_hooks.def into one OVERSUB_DRIVER_EMIT per exported
// driver symbol (the plain ABI and its _ptsz/_ptds twin are two), and one
// OVERSUB_DRIVER_OLD_EMIT per older ABI that is not intercepted.
//
// The includer defines
//   OVERSUB_DRIVER_EMIT(family, symbol, base, query, since, per_thread, params, args)
// (symbol: cuMemcpyHtoD_v2 or cuMemcpyHtoD_v2_ptds; base: the plain ABI, whose
// declaration in cuda.h gives the type; since: the version a query answers it from;
// per_thread: 1 for the twin) and optionally OVERSUB_DRIVER_OLD_EMIT(query, since),
// then includes this file (no include guard). Both are undefined at the end.
//
// Also run through the C preprocessor alone for the version script, so macros only.
#ifndef OVERSUB_DRIVER_OLD_EMIT
#define OVERSUB_DRIVER_OLD_EMIT(query, since)
#endif
#define OVERSUB_DRIVER_HOOK(family, variants, name, query, since, pt_since, params, args) \
  OVERSUB_DRIVER_EMIT(family, name, name, query, since, 0, params, args)                  \
  OVERSUB_DRIVER_VARIANT_##variants(family, name, query, pt_since, params, args)
#define OVERSUB_DRIVER_OLD(query, since) OVERSUB_DRIVER_OLD_EMIT(query, since)
#define OVERSUB_DRIVER_VARIANT_none(family, name, query, pt_since, params, args)
#define OVERSUB_DRIVER_VARIANT_ptsz(family, name, query, pt_since, params, args) \
  OVERSUB_DRIVER_EMIT(family, name##_ptsz, name, query, pt_since, 1, params, args)
#define OVERSUB_DRIVER_VARIANT_ptds(family, name, query, pt_since, params, args) \
  OVERSUB_DRIVER_EMIT(family, name##_ptds, name, query, pt_since, 1, params, args)

#include "driver_hooks.def"

#undef OVERSUB_DRIVER_HOOK
#undef OVERSUB_DRIVER_OLD
#undef OVERSUB_DRIVER_VARIANT_none
#undef OVERSUB_DRIVER_VARIANT_ptsz
#undef OVERSUB_DRIVER_VARIANT_ptds
#undef OVERSUB_DRIVER_EMIT
#undef OVERSUB_DRIVER_OLD_EMIT
