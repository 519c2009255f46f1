/* The command-line parser of common/argv.h. */
#define _GNU_SOURCE
#include "common/argv.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

TRIB_ERROR_MODULE(argv)

void argv_choices(const char *(*choice)(int i), char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; choice(i) && n < cap; i++) n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", choice(i));
}

int argv_integer(const char *value, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (!errno && end != value && !*end) {
        *out = v;
        return 0;
    }
    /* 1e6, 2.5e5: a decimal with an exponent whose value is an integer
     * (within 2^53, where every integer is a double); not 1.5, 1e-3, 0x10 */
    if (end == value || (*end != '.' && *end != 'e' && *end != 'E')) return -1;
    for (const char *p = value; *p; p++)
        if (!strchr("0123456789+-.eE", *p)) return -1;
    errno = 0;
    double d = strtod(value, &end);
    if (errno || end == value || *end || !(fabs(d) <= 9007199254740992.0) || d != floor(d)) return -1;
    *out = (long long)d;
    return 0;
}

int argv_long(const char *name, const char *value, long lo, long hi, long *out)
{
    long long v = 0;
    if (argv_integer(value, &v) != 0 || v < lo || v > hi)
        return argv_set_error("--%s must be an integer in %ld..%ld, not '%s'", name, lo, hi, value);
    *out = (long)v;
    return 0;
}

static int usage_error(const char *prog, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see %s --help)\n", prog);
    return 2;
}

/* The option named `name` (its name, its alias, or no-NAME of a negatable
 * switch), or NULL; *negated says which. */
static const struct argv_opt *find_long(const struct argv_opt *opts, int n, const char *name, bool *negated)
{
    *negated = false;
    for (int k = 0; k < n; k++)
        if (opts[k].name && (strcmp(opts[k].name, name) == 0 || (opts[k].alias && strcmp(opts[k].alias, name) == 0)))
            return &opts[k];
    if (strncmp(name, "no-", 3) != 0) return NULL;
    for (int k = 0; k < n; k++)
        if (opts[k].name && opts[k].negatable && strcmp(opts[k].name, name + 3) == 0) {
            *negated = true;
            return &opts[k];
        }
    return NULL;
}

static const struct argv_opt *find_other(const struct argv_opt *opts, int n, char short_name)
{
    for (int k = 0; k < n; k++)
        if (short_name ? opts[k].name && opts[k].short_name == short_name : !opts[k].name) return &opts[k];
    return NULL;
}

/* Calls o's setter with val; 0, or 2 after printing why. */
static int apply(const char *prog, const struct argv_opt *o, const char *val)
{
    argv_error_text.msg[0] = '\0';
    int rc = o->set(o->user, val);
    if (rc == 0) return 0;
    if (rc == -2) return 2;
    if (argv_error_text.msg[0]) return usage_error(prog, "%s%s", argv_error_text.msg, "");
    char choices[512] = "", what[700];
    if (o->choice) argv_choices(o->choice, choices, sizeof choices);
    snprintf(what, sizeof what, "--%s%s%s%s", o->name ? o->name : "", o->choice ? " (choices: " : "", choices,
             o->choice ? ")" : "");
    return usage_error(prog, "bad value '%s' for %s", val ? val : "", what);
}

/* A word the command line has where no positional argument is taken:
 * "unexpected argument 'W'", and when it follows an option (prev), what
 * that option takes instead: one comma-separated value (--hidden 256 256),
 * or nothing, being a switch (--norm-obs false). 2 after printing it. */
static int unexpected(const char *prog, const struct argv_opt *prev, const char *prev_val, const char *a)
{
    bool prev_valued = prev_val != NULL;
    char why[400] = "";
    static const char *const words[] = { "true", "false", "yes", "no", "on", "off", "0", "1" };
    bool bool_word = false;
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) bool_word |= strcasecmp(a, words[k]) == 0;
    if (prev && prev_valued && prev->arg && strchr(prev->arg, ','))
        snprintf(why, sizeof why, ": --%s takes one comma-separated value, e.g. --%s %.100s,%.100s", prev->name,
                 prev->name, prev_val, a);
    else if (prev && prev_valued)
        snprintf(why, sizeof why, ": --%s takes one value", prev->name);
    else if (prev && !prev->arg && bool_word && prev->negatable)
        snprintf(why, sizeof why, ": --%s is a switch and takes no value: --%s turns it on, --no-%s off", prev->name,
                 prev->name, prev->name);
    else if (prev && !prev->arg && bool_word)
        snprintf(why, sizeof why, ": --%s is a switch and takes no value", prev->name);
    return usage_error(prog, "unexpected argument '%s'%s", a, why);
}

/* The argument at argv[*i] (and its value, which may be the next one). 0,
 * or 2 after printing why. *prev: the option before it (NULL: none),
 * *prev_val: the value it took (NULL: a switch); both set for the next. */
static int one(const char *prog, const struct argv_opt *opts, int n, int argc, char **argv, int *i,
               const struct argv_opt **prev, const char **prev_val)
{
    const char *a = argv[*i], *val = NULL;
    const struct argv_opt *o = NULL;
    bool negated = false;
    if (a[0] == '-' && a[1] && a[1] != '-' && !a[2]) {
        o = find_other(opts, n, a[1]);
    } else if (strncmp(a, "--", 2) == 0 && a[2]) {
        char name[128];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len < sizeof name) {
            memcpy(name, a + 2, len);
            name[len] = '\0';
            o = find_long(opts, n, name, &negated);
        }
        val = eq ? eq + 1 : NULL;
    } else {
        const struct argv_opt *pos = find_other(opts, n, 0);
        if (!pos) return unexpected(prog, *prev, *prev_val, a);
        *prev = NULL;
        return apply(prog, pos, a);
    }
    if (!o) return usage_error(prog, "unknown option '%s'%s", a, "");
    *prev = o;
    *prev_val = NULL;
    if (!o->arg) {
        char how[300] = "";
        if (o->negatable) snprintf(how, sizeof how, ": --%s turns it on, --no-%s off", o->name, o->name);
        if (val) return usage_error(prog, "option '--%s' takes no value%s", o->name, how);
        return apply(prog, o, negated ? "false" : NULL);
    }
    if (!val) {
        if (*i + 1 >= argc) return usage_error(prog, "option '--%s' needs a value%s", o->name, "");
        val = argv[++*i];
    }
    *prev_val = val;
    return apply(prog, o, val);
}

int argv_parse(const char *prog, const char *about, const struct argv_opt *opts, int n, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (about) printf("%s", about);
            argv_usage(stdout, opts, n);
            printf("  %-24s this text\n", "-h, --help");
            return 1;
        }
    const struct argv_opt *prev = NULL;
    const char *prev_val = NULL;
    for (int i = 1; i < argc; i++) {
        int rc = one(prog, opts, n, argc, argv, &i, &prev, &prev_val);
        if (rc) return rc;
    }
    return 0;
}

/* text's lines, each after the left column's room. */
static void indented(FILE *f, const char *text)
{
    for (const char *p = text; *p; p++) {
        fputc(*p, f);
        if (*p == '\n' && p[1]) fprintf(f, "  %-24s ", "");
    }
}

static void one_usage(FILE *f, const struct argv_opt *o)
{
    char lhs[160], sh[8] = "    ";
    if (o->short_name) snprintf(sh, sizeof sh, "-%c, ", o->short_name);
    snprintf(lhs, sizeof lhs, "%s--%s%s%s", sh, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    if (strlen(lhs) > 24) fprintf(f, "  %s\n  %-24s ", lhs, "");
    else fprintf(f, "  %-24s ", lhs);
    indented(f, o->help);
    if (o->choice) {
        char c[512];
        argv_choices(o->choice, c, sizeof c);
        fprintf(f, "\n  %-24s (choices: %s)", "", c);
    }
    if (o->note) {
        fprintf(f, "\n  %-24s (", "");
        indented(f, o->note);
        fputc(')', f);
    }
    if (o->alias) fprintf(f, "\n  %-24s (also --%s)", "", o->alias);
    if (o->negatable) fprintf(f, "\n  %-24s (off: --no-%s)", "", o->name);
    fputc('\n', f);
}

void argv_usage(FILE *f, const struct argv_opt *opts, int n)
{
    for (int k = 0; k < n; k++)
        if (opts[k].name && opts[k].help) one_usage(f, &opts[k]);
}

int argv_set_flag(void *flag, const char *value)
{
    *(bool *)flag = !(value && strcmp(value, "false") == 0);
    return 0;
}
