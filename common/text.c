/* Escaping text for a log line (text.h). */
#include "common/text.h"

char *text_escape(char *out, size_t cap, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[4];
        size_t w = 0;
        if (c >= 0x20 && c < 0x7f) e[w++] = (char)c;
        else e[w++] = '\\', e[w++] = 'x', e[w++] = hex[c >> 4], e[w++] = hex[c & 15];
        if (n + w >= cap) break;
        for (size_t j = 0; j < w; j++) out[n++] = e[j];
    }
    out[n] = '\0';
    return out;
}
