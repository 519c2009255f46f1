/* A module's last-error text (docs/conventions.md "Errors"), one helper for
 * every folder: a module's header says TRIB_ERROR_DECLARE(prefix) and its one
 * owning file TRIB_ERROR_MODULE(prefix), which make
 *   const char *prefix_last_error(void);          this thread's last error
 *   int prefix_set_error(const char *fmt, ...);   sets it, returns -1
 * so a failing function ends `return prefix_set_error("...", ...);` (a
 * pointer-returning one: `prefix_set_error(...); return NULL;`). The text
 * is the thread's own (_Thread_local); the arguments may point into it, so
 * a message can wrap the previous one: prefix_set_error("loading: %s",
 * prefix_last_error()). Header only, below every layer. */
#ifndef TRIB_COMMON_ERROR_H
#define TRIB_COMMON_ERROR_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define TRIB_ERROR_CAP 1024

struct trib_error { char msg[TRIB_ERROR_CAP]; };

/* Formats the message into e (truncated to TRIB_ERROR_CAP - 1 bytes). The
 * arguments may point into e itself, so a message can wrap the previous
 * one: set_error("loading: %s", x_last_error()). */
static inline void trib_error_vset(struct trib_error *e, const char *fmt, va_list ap)
{
    char tmp[TRIB_ERROR_CAP];
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    memcpy(e->msg, tmp, strlen(tmp) + 1);
}

/* Formats a failure's reason into a caller's buffer (why, cap) and returns
 * -1, for functions that report through an out-parameter: `return
 * trib_errf(why, cap, "bad %s", x);`. */
static inline int trib_errf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int trib_errf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return -1;
}

static inline const char *trib_error_get(const struct trib_error *e) { return e->msg; }
static inline void trib_error_clear(struct trib_error *e) { e->msg[0] = '\0'; }

#define TRIB_ERROR_DECLARE(P)                                                                                   \
    const char *P##_last_error(void);                                                                           \
    int P##_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TRIB_ERROR_MODULE(P)                                                                                    \
    static _Thread_local struct trib_error P##_error_text;                                                      \
    const char *P##_last_error(void) { return trib_error_get(&P##_error_text); }                                \
    int P##_set_error(const char *fmt, ...)                                                                     \
    {                                                                                                           \
        va_list ap;                                                                                             \
        va_start(ap, fmt);                                                                                      \
        trib_error_vset(&P##_error_text, fmt, ap);                                                              \
        va_end(ap);                                                                                             \
        return -1;                                                                                              \
    }

#endif
