/* One command-line parser for every program: a table of long options (name,
 * value, help, setter), `--name VALUE` and `--name=VALUE`, an optional
 * one-letter form (-e VALUE), --no-NAME for a negatable switch, positional
 * arguments handed to a setter, and --help written from the same table.
 * Errors name the flag; an option with choices lists them:
 *   prog: bad value 'asynch' for --mode (choices: sync, async) (see prog --help)
 * Below every layer. */
#ifndef TRIB_COMMON_ARGV_H
#define TRIB_COMMON_ARGV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct argv_opt {
    const char *name;               /* without "--"; NULL: the row that takes the positional arguments */
    const char *arg;                /* the value's name in --help ("N", "DIR"); NULL: a switch */
    const char *help;               /* lines separated by '\n'; NULL: not listed */
    /* 0, or -1: the value is bad (the message is argv_error's text when the
     * setter set one, else "bad value 'V' for --NAME" with the choices), or
     * -2: the setter printed why itself. A switch gets NULL, or "false" for
     * --no-NAME. */
    int (*set)(void *user, const char *value);
    void *user;
    char short_name;                /* -x, or 0 */
    bool negatable;                 /* a switch that also takes --no-NAME */
    const char *(*choice)(int i);   /* the values it takes, NULL past the last (listed in help and errors) */
    const char *alias;              /* another name for it (e.g. CleanRL's), or NULL */
    const char *note;               /* a line after the help, in parentheses (e.g. the default), or NULL */
};

/* Parses argv[1..argc) by opts[0..n), in order. Returns 0 when parsed, 1
 * after --help or -h (`about`, then argv_usage of opts, on stdout), 2 after
 * printing a bad usage on stderr ("prog: ... (see prog --help)"). */
int argv_parse(const char *prog, const char *about, const struct argv_opt *opts, int n, int argc, char **argv);

/* The options' help: one entry per option, "  -x, --name ARG   help" with
 * its choices, note and alias. */
void argv_usage(FILE *f, const struct argv_opt *opts, int n);

/* For a setter: the message argv_parse prints for the value it refuses
 * (printf format). Returns -1. */
int argv_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The message a setter left (common/error.h's one helper; this thread's). */
const char *argv_last_error(void);

/* "a, b, c": the names choice(0), choice(1), ... until NULL, into buf. */
void argv_choices(const char *(*choice)(int i), char *buf, size_t cap);

/* The setter of a switch that only sets a bool: user points to it; true,
 * or false for --no-NAME. */
int argv_set_flag(void *flag, const char *value);

/* value as an integer into *out: decimal digits (strtoll's form), or a
 * decimal with an exponent whose value is an integer of at most 2^53 in
 * size (1e6, 2.5e5, as CleanRL's command lines write step counts; not 1.5,
 * 1e-3, 0x10). 0, or -1 (no message set). */
int argv_integer(const char *value, long long *out);

/* For setters: *out = value as an integer in lo..hi (argv_integer's forms); else -1 with
 * argv_set_error("--NAME must be an integer in LO..HI, not 'VALUE'"). */
int argv_long(const char *name, const char *value, long lo, long hi, long *out);

#endif
