/* The distributed checkpoint's MANIFEST (dist_ckpt_internal.h): its strict
 * parser, and the names and numbers the format shares with the rest of
 * dist_ckpt (what a name may be, decimal integers, a shard's file name).
 * Calls nothing else of dist_ckpt: dist_ckpt.c and dist_ckpt_files.c call it. */
#include "optim/dist_ckpt_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define MANIFEST_HEADER DIST_CKPT_MANIFEST_HEADER
#define NAME_MAX_LEN DIST_CKPT_NAME_MAX
#define LINE_MAX_LEN 511

/* ---- names and numbers ---------------------------------------------------------- */

bool dist_ckpt_good_name(const char *s, bool worker)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > NAME_MAX_LEN) return false;
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)s[i]) || !isprint((unsigned char)s[i]) || (worker && s[i] == '/')) return false;
    return true;
}

/* s[0..n) for an error message: at most max bytes, unprintable ones '?'. */
const char *dist_ckpt_printable(const char *s, size_t n, size_t max, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && i < max && k + 4 < cap; i++)
        out[k++] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (n > max && k + 4 < cap) k += (size_t)snprintf(out + k, cap - k, "...");
    out[k] = '\0';
    return out;
}

/* s[0..n) as a decimal integer in lo..hi: digits, maybe a '-' first, no
 * '+', no leading zero. DIST_CKPT_NUM_OK, DIST_CKPT_NUM_BAD (not a number)
 * or DIST_CKPT_NUM_RANGE (a number outside lo..hi, or beyond 64 bits). */
int dist_ckpt_parse_int(const char *s, size_t n, int64_t lo, int64_t hi, int64_t *out)
{
    bool neg = n > 0 && s[0] == '-';
    size_t i = neg;
    if (i == n || (s[i] == '0' && n - i > 1)) return DIST_CKPT_NUM_BAD;
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    bool over = false;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return DIST_CKPT_NUM_BAD;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (over || v > (lim - d) / 10) over = true;
        else v = v * 10 + d;
    }
    if (over) return DIST_CKPT_NUM_RANGE;
    int64_t x = !neg ? (int64_t)v : v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    if (x < lo || x > hi) return DIST_CKPT_NUM_RANGE;
    *out = x;
    return DIST_CKPT_NUM_OK;
}

/* "shard-G-WORKER.bin" of this generation and worker (file of cap >= 128). */
void dist_ckpt_shard_file_name(int64_t gen, const char *worker, char *file, size_t cap)
{
    snprintf(file, cap, "shard-%lld-%s.bin", (long long)gen, worker);
}

/* ---- the MANIFEST parser (dist_ckpt_internal.h) ---------------------------------- */

enum keyword { KW_GENERATION, KW_STEP, KW_SHARD, KW_MODULE, KW_OPTIMIZER };
static const struct { const char *word; enum keyword kw; int n_args; } KEYWORDS[] = {
    { "generation", KW_GENERATION, 1 }, { "step", KW_STEP, 1 },     { "shard", KW_SHARD, 4 },
    { "module", KW_MODULE, 2 },         { "optimizer", KW_OPTIMIZER, 1 },
};

struct token { const char *p; size_t n; };

/* One line (its number ln, without its '\n') into *m. 0 or -1 with err. */
static int parse_line(const char *line, size_t len, int ln, struct dist_ckpt_manifest *m, char *err, size_t cap)
{
    char q[128], q2[128];
    struct token t[6];
    int nt = 0;
    for (size_t i = 0, s = 0; i <= len; i++) {
        if (i < len && line[i] != ' ') continue;
        if (i == s || nt == 6) {
            nt = -1;
            break;
        }
        t[nt++] = (struct token){ line + s, i - s };
        s = i + 1;
    }
    size_t k = 0, nk = sizeof KEYWORDS / sizeof *KEYWORDS;
    while (nt > 0 && k < nk && !(strlen(KEYWORDS[k].word) == t[0].n && memcmp(KEYWORDS[k].word, t[0].p, t[0].n) == 0)) k++;
    if (nt <= 0 || k == nk || nt != 1 + KEYWORDS[k].n_args)
        return snprintf(err, cap, "line %d: malformed: '%s'", ln, dist_ckpt_printable(line, len, 60, q, sizeof q)), -1;
    /* names: copied out, checked; numbers: parsed, range-checked */
    char a[128] = "", b[128] = "";
    int64_t x = 0;
    switch (KEYWORDS[k].kw) {
    case KW_GENERATION:
    case KW_STEP: {
        bool gen = KEYWORDS[k].kw == KW_GENERATION;
        int64_t *dst = gen ? &m->generation : &m->step;
        int rc = gen ? dist_ckpt_parse_int(t[1].p, t[1].n, 1, DIST_CKPT_MAX_GENERATION, &x)
                     : dist_ckpt_parse_int(t[1].p, t[1].n, INT64_MIN, INT64_MAX, &x);
        if (rc == DIST_CKPT_NUM_RANGE && gen)
            return snprintf(err, cap, "line %d: generation %s is out of range 1..%lld", ln,
                            dist_ckpt_printable(t[1].p, t[1].n, 40, q, sizeof q), DIST_CKPT_MAX_GENERATION), -1;
        if (rc == DIST_CKPT_NUM_RANGE)
            return snprintf(err, cap, "line %d: step %s is out of range (64-bit signed)", ln,
                            dist_ckpt_printable(t[1].p, t[1].n, 40, q, sizeof q)), -1;
        if (rc != DIST_CKPT_NUM_OK) return snprintf(err, cap, "line %d: malformed: '%s'", ln, dist_ckpt_printable(line, len, 60, q, sizeof q)), -1;
        if (gen && m->generation != 0)
            return snprintf(err, cap, "line %d: a second generation line", ln), -1;
        *dst = x;
        return 0;
    }
    default:
        break;
    }
    /* The name fields: worker of a shard or an optimizer, module and worker of a module. */
    const struct token *ta = &t[1], *tb = KEYWORDS[k].kw == KW_MODULE ? &t[2] : NULL;
    if (ta->n < sizeof a) memcpy(a, ta->p, ta->n), a[ta->n] = '\0';
    if (tb && tb->n < sizeof b) memcpy(b, tb->p, tb->n), b[tb->n] = '\0';
    bool a_worker = KEYWORDS[k].kw != KW_MODULE;
    if (!dist_ckpt_good_name(a, a_worker) || ta->n >= sizeof a)
        return snprintf(err, cap, "line %d: '%s' is not a %s name (1-%d printable characters without spaces%s)", ln,
                        dist_ckpt_printable(ta->p, ta->n, 60, q, sizeof q), a_worker ? "worker" : "module", NAME_MAX_LEN,
                        a_worker ? " or '/'" : ""), -1;
    if (tb && (!dist_ckpt_good_name(b, true) || tb->n >= sizeof b))
        return snprintf(err, cap, "line %d: '%s' is not a worker name (1-%d printable characters without spaces or '/')",
                        ln, dist_ckpt_printable(tb->p, tb->n, 60, q, sizeof q), NAME_MAX_LEN), -1;
    switch (KEYWORDS[k].kw) {
    case KW_SHARD: {
        if (m->generation == 0) return snprintf(err, cap, "line %d: a shard before the generation line", ln), -1;
        if (m->n_shards == DIST_CKPT_MAX_SHARDS)
            return snprintf(err, cap, "line %d: more than %d shards", ln, DIST_CKPT_MAX_SHARDS), -1;
        for (int i = 0; i < m->n_shards; i++)
            if (strcmp(m->shard[i].worker, a) == 0) return snprintf(err, cap, "line %d: a second shard of %s", ln, a), -1;
        char want[128];
        dist_ckpt_shard_file_name(m->generation, a, want, sizeof want);
        if (strlen(want) != t[2].n || memcmp(want, t[2].p, t[2].n) != 0)
            return snprintf(err, cap, "line %d: shard file '%s' of %s is not %s", ln, dist_ckpt_printable(t[2].p, t[2].n, 60, q, sizeof q),
                            a, want), -1;
        int rc = dist_ckpt_parse_int(t[3].p, t[3].n, 0, DIST_CKPT_MAX_SHARD_BYTES, &x);
        if (rc != DIST_CKPT_NUM_OK)
            return snprintf(err, cap, "line %d: shard size %s is %s 0..%lld", ln, dist_ckpt_printable(t[3].p, t[3].n, 40, q, sizeof q),
                            rc == DIST_CKPT_NUM_RANGE ? "out of range" : "not a number in", (long long)DIST_CKPT_MAX_SHARD_BYTES), -1;
        uint64_t h = 0;
        bool hex = t[4].n == 16;
        for (size_t i = 0; hex && i < 16; i++) {
            char c = t[4].p[i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            hex = d >= 0;
            h = h << 4 | (uint64_t)(hex ? d : 0);
        }
        if (!hex)
            return snprintf(err, cap, "line %d: shard hash '%s' is not 16 hex digits", ln,
                            dist_ckpt_printable(t[4].p, t[4].n, 40, q2, sizeof q2)), -1;
        int i = m->n_shards++;
        snprintf(m->shard[i].worker, sizeof m->shard[i].worker, "%s", a);
        snprintf(m->shard[i].file, sizeof m->shard[i].file, "%s", want);
        m->shard[i].size = x;
        m->shard[i].hash = h;
        return 0;
    }
    case KW_MODULE: {
        if (m->n_mods == DIST_CKPT_MAX_MODULES)
            return snprintf(err, cap, "line %d: more than %d modules", ln, DIST_CKPT_MAX_MODULES), -1;
        for (int i = 0; i < m->n_mods; i++)
            if (strcmp(m->mod[i].name, a) == 0) return snprintf(err, cap, "line %d: module '%s' listed twice", ln, a), -1;
        snprintf(m->mod[m->n_mods].name, 64, "%s", a);
        snprintf(m->mod[m->n_mods++].worker, 64, "%s", b);
        return 0;
    }
    case KW_OPTIMIZER:
        if (m->n_optim == DIST_CKPT_MAX_SHARDS)
            return snprintf(err, cap, "line %d: more than %d optimizer owners", ln, DIST_CKPT_MAX_SHARDS), -1;
        snprintf(m->optim[m->n_optim++], 64, "%s", a);
        return 0;
    default:
        return -1;
    }
}

int dist_ckpt_manifest_parse(const char *text, size_t len, struct dist_ckpt_manifest *m, char *err, size_t cap)
{
    memset(m, 0, sizeof *m);
    bool step = false;
    int ln = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        const char *line = text + at;
        at += n + (nl != NULL);
        ln++;
        if (n > LINE_MAX_LEN) return snprintf(err, cap, "line %d: longer than %d bytes", ln, LINE_MAX_LEN), -1;
        if (ln == 1) {
            if (n != strlen(MANIFEST_HEADER) || memcmp(line, MANIFEST_HEADER, n) != 0)
                return snprintf(err, cap, "not a checkpoint manifest"), -1;
            continue;
        }
        bool is_step = n > 5 && memcmp(line, "step ", 5) == 0;
        if (is_step && step) return snprintf(err, cap, "line %d: a second step line", ln), -1;
        step |= is_step;
        if (parse_line(line, n, ln, m, err, cap) != 0) return -1;
    }
    if (ln == 0) return snprintf(err, cap, "empty"), -1;
    if (m->generation == 0) return snprintf(err, cap, "no generation line"), -1;
    return 0;
}
