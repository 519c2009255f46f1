/* Text that came from elsewhere (a peer's error reply, its "why", its
 * worker name) made safe to print in a log line: it cannot end the line,
 * move the cursor or colour the terminal, so it cannot forge lines of
 * ours. Below every layer. */
#ifndef TRIB_COMMON_TEXT_H
#define TRIB_COMMON_TEXT_H

#include <stddef.h>

/* The room text_escape needs for n bytes of text: each may take 4. */
#define TEXT_ESCAPED_CAP(n) (4 * (size_t)(n) + 1)

/* Writes s (len bytes, NULs included) into out (cap > 0 bytes, always
 * NUL-terminated) with every byte that is not printable ASCII (control
 * characters, DEL, bytes from 0x80 up) written as \xNN; cut at a whole
 * character when out is too small. A backslash stays one, so text escaped
 * once (here or by another layer) comes out of a second pass unchanged.
 * Returns out. Any thread. */
char *text_escape(char *out, size_t cap, const char *s, size_t len);

#endif
