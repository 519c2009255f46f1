/* Invariant checks shared by every layer: a broken invariant or an
 * out-of-memory aborts with file:line (docs/conventions.md "Errors"). Header-only;
 * it sits below every layer and depends on nothing. */
#ifndef TRIB_COMMON_CHECK_H
#define TRIB_COMMON_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                              \
    do {                                                                      \
        if (!(x)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,  \
                    #x);                                                      \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* Allocation that never returns NULL (aborts with file:line instead). */
#define CHECK_ALLOC(p) CHECK((p) != NULL)

static inline void *trib_xmalloc(size_t n) { void *p = malloc(n ? n : 1); CHECK_ALLOC(p); return p; }
static inline void *trib_xcalloc(size_t c, size_t n) { void *p = calloc(c ? c : 1, n ? n : 1); CHECK_ALLOC(p); return p; }
static inline void *trib_xrealloc(void *q, size_t n) { void *p = realloc(q, n ? n : 1); CHECK_ALLOC(p); return p; }

#endif
