/* The run key: making and reading DIR/tributary.key, and the security
 * flags that decide whether a run is encrypted (rl/keys.h). */
#define _GNU_SOURCE
#include "rl/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/argv.h"
#include "rl/rl.h"

#define KEY_FILE_MAX 4096

static int key_path(const char *dir, struct rl_keys *k)
{
    if (!dir || !*dir) return rl_set_error("--keys needs a directory");
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;       /* "DIR/" names the same file */
    if (n + sizeof RL_KEY_FILE + 1 > sizeof k->path || n > 300) return rl_set_error("key directory name too long: %.60s...", dir);
    snprintf(k->path, sizeof k->path, "%.*s/%s", (int)n, dir, RL_KEY_FILE);
    return 0;
}

static bool z85_ok(const char *s)
{
    uint8_t bin[32];
    return strlen(s) == 40 && zmq_z85_decode(bin, s) != NULL;
}

void rl_key_short(const char *z85, char out[12])
{
    snprintf(out, 12, "%.8s...", z85);
}

int rl_keys_make(const char *dir, struct rl_keys *k)
{
    memset(k, 0, sizeof *k);
    if (key_path(dir, k) != 0) return -1;
    if (!zmq_has("curve")) return rl_set_error("this libzmq has no CURVE support: cannot make a key");
    if (mkdir(dir, 0700) == 0) {
        if (chmod(dir, 0700) != 0) return rl_set_error("chmod 700 %s: %s", dir, strerror(errno));
    } else if (errno != EEXIST) {
        return rl_set_error("cannot make the key directory %s: %s", dir, strerror(errno));
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return rl_set_error("%s is not a directory", dir);
    if (zmq_curve_keypair(k->public_key, k->secret_key) != 0)
        return rl_set_error("zmq_curve_keypair failed: %s", zmq_strerror(zmq_errno()));
    int fd = open(k->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        explicit_bzero(k->secret_key, sizeof k->secret_key);
        if (e == EEXIST) return rl_set_error("%s exists: not overwriting it (remove it to make a new key)", k->path);
        return rl_set_error("cannot create %s: %s", k->path, strerror(e));
    }
    char text[256];
    int len = snprintf(text, sizeof text,
                       "# tributary run key (CURVE, Z85): the agent and every observer of the run use it (--keys DIR).\n"
                       "# Whoever holds it can join the run: keep it mode 600.\n"
                       "public = %s\nsecret = %s\n", k->public_key, k->secret_key);
    bool ok = fchmod(fd, 0600) == 0 && len > 0 && len < (int)sizeof text && write(fd, text, (size_t)len) == len &&
              fsync(fd) == 0;
    int e = errno;
    explicit_bzero(text, sizeof text);
    if (close(fd) != 0) ok = false;
    if (!ok) {
        unlink(k->path);
        explicit_bzero(k->secret_key, sizeof k->secret_key);
        return rl_set_error("cannot write %s: %s", k->path, strerror(e));
    }
    return 0;
}

int rl_keys_make_cli(const char *prog, const char *dir)
{
    struct rl_keys k;
    if (rl_keys_make(dir, &k) != 0) {
        fprintf(stderr, "%s: %s\n", prog, rl_last_error());
        return 1;
    }
    char key[12];
    rl_key_short(k.public_key, key);
    explicit_bzero(k.secret_key, sizeof k.secret_key);
    printf("wrote %s (public key %s); copy %s to every host of the run, keeping it private\n"
           "(e.g. scp -rp), and give the agent and every observer --keys %s\n", k.path, key, dir, dir);
    return 0;
}

/* Parses the key file's text (NUL-terminated) into *k. */
static int parse_keys(char *text, struct rl_keys *k)
{
    bool have_pub = false, have_sec = false;
    int line = 0;
    for (char *s = text, *next; s && *s; s = next) {
        line++;
        next = strchr(s, '\n');
        if (next) *next++ = '\0';
        size_t n = strlen(s);
        while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
        while (*s == ' ' || *s == '\t') s++;
        if (!*s || *s == '#') continue;
        char *eq = strchr(s, '=');
        char *name_end = eq;
        while (name_end && name_end > s && (name_end[-1] == ' ' || name_end[-1] == '\t')) name_end--;
        size_t name_len = eq ? (size_t)(name_end - s) : 0;
        bool pub = name_len == 6 && strncmp(s, "public", 6) == 0, sec = name_len == 6 && strncmp(s, "secret", 6) == 0;
        if (!pub && !sec) return rl_set_error("%s: line %d: expected 'public = KEY' or 'secret = KEY'", k->path, line);
        const char *name = pub ? "public" : "secret";
        if ((pub && have_pub) || (sec && have_sec)) return rl_set_error("%s: line %d: '%s' given twice", k->path, line, name);
        char *v = eq + 1;
        while (*v == ' ' || *v == '\t') v++;
        if (!z85_ok(v)) return rl_set_error("%s: line %d: '%s' is not a 40-character Z85 key", k->path, line, name);
        memcpy(pub ? k->public_key : k->secret_key, v, 41);
        if (pub) have_pub = true;
        else have_sec = true;
    }
    if (!have_pub || !have_sec)
        return rl_set_error("%s: no '%s' line (truncated?)", k->path, have_pub ? "secret" : "public");
    char derived[41];
    if (zmq_curve_public(derived, k->secret_key) != 0 || strcmp(derived, k->public_key) != 0)
        return rl_set_error("%s: the public key is not the secret key's", k->path);
    return 0;
}

int rl_keys_load(const char *dir, struct rl_keys *k)
{
    memset(k, 0, sizeof *k);
    if (key_path(dir, k) != 0) return -1;
    int fd = open(k->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return rl_set_error("cannot open %s: %s (make a key with tributary-agent --make-keys %s)", k->path,
                            strerror(errno), dir);
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) rc = rl_set_error("cannot stat %s: %s", k->path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rc = rl_set_error("%s is not a regular file", k->path);
    else if (st.st_mode & 077)
        rc = rl_set_error("%s is readable by group or others (mode %04o): run chmod 600 %s", k->path,
                          (unsigned)(st.st_mode & 07777), k->path);
    char text[KEY_FILE_MAX + 1];
    ssize_t got = 0;
    if (rc == 0) {
        size_t n = 0;
        while (n < sizeof text && (got = read(fd, text + n, sizeof text - n)) > 0) n += (size_t)got;
        if (got < 0) rc = rl_set_error("cannot read %s: %s", k->path, strerror(errno));
        else if (n > KEY_FILE_MAX) rc = rl_set_error("%s: larger than %d bytes: not a key file", k->path, KEY_FILE_MAX);
        else if (memchr(text, '\0', n)) rc = rl_set_error("%s: not a text file", k->path);
        text[n < KEY_FILE_MAX ? n : KEY_FILE_MAX] = '\0';
    }
    close(fd);
    if (rc == 0) rc = parse_keys(text, k);
    explicit_bzero(text, sizeof text);
    if (rc != 0) explicit_bzero(k->secret_key, sizeof k->secret_key);
    return rc;
}

void rl_keys_apply(const struct rl_keys *k, struct rpc_opts *o)
{
    o->curve = true;
    o->curve_public_key = k->public_key;
    o->curve_secret_key = k->secret_key;
    o->curve_server_key = NULL;     /* the run's own public key */
    o->curve_allow = NULL;          /* admits the run's own public key only */
}

bool rl_addr_is_loopback(const char *addr)
{
    if (!addr) return false;
    char host[256];
    bool url = strncmp(addr, "tcp://", 6) == 0;
    const char *h = url ? addr + 6 : addr;
    size_t n = strlen(h);
    if (*h == '[') {                /* [v6]:port or [v6] */
        const char *close = strchr(h, ']');
        if (!close) return false;
        h++;
        n = (size_t)(close - h);
    } else if (url) {               /* host:port */
        const char *colon = strrchr(h, ':');
        if (!colon) return false;
        n = (size_t)(colon - h);
    }                               /* else a bare host: a name, v4 or v6 address */
    if (n == 0 || n >= sizeof host) return false;
    memcpy(host, h, n);
    host[n] = '\0';
    if (strcmp(host, "*") == 0) return false;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return false;
    bool all = true;
    for (struct addrinfo *a = res; a && all; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            uint32_t ip = ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr);
            all = (ip >> 24) == 127;
        } else if (a->ai_family == AF_INET6) {
            const struct in6_addr *ip = &((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
            all = IN6_IS_ADDR_LOOPBACK(ip) || (IN6_IS_ADDR_V4MAPPED(ip) && ip->s6_addr[12] == 127);
        } else {
            all = false;
        }
    }
    freeaddrinfo(res);
    return all;
}

/* ---- the flags ------------------------------------------------------------ */

static int set_keys(void *user, const char *dir)
{
    struct rl_security *s = user;
    if (!dir || !*dir || strlen(dir) >= sizeof s->keys_dir) return -1;
    snprintf(s->keys_dir, sizeof s->keys_dir, "%s", dir);
    return 0;
}

int rl_security_set_keys(struct rl_security *s, const char *dir)
{
    if (set_keys(s, dir) == 0) return 0;
    const char *prog = s->prog ? s->prog : "tributary";
    fprintf(stderr, "%s: --keys needs a directory name of 1..%zu characters (see %s --help)\n", prog,
            sizeof s->keys_dir - 1, prog);
    return -1;
}

static int set_keys_opt(void *user, const char *dir) { return rl_security_set_keys(user, dir) == 0 ? 0 : -2; }

int rl_security_opts(struct rl_security *s, const char *prog, struct argv_opt *out)
{
    s->prog = prog;
    out[0] = (struct argv_opt){ .name = "keys", .arg = "DIR", .set = set_keys_opt, .user = s,
                                .help = "encrypt and authenticate the run (CURVE) with the key in\n"
                                        "DIR/" RL_KEY_FILE " (tributary-agent --make-keys DIR makes one;\n"
                                        "give the agent and every observer the same one); needed\n"
                                        "unless every address is loopback or --insecure is given" };
    out[1] = (struct argv_opt){ .name = "insecure", .set = argv_set_flag, .user = &s->insecure,
                                .help = "run unencrypted and unauthenticated even across hosts\n"
                                        "(a trusted network only)" };
    return 2;
}

int rl_security_resolve(struct rl_security *s, const char *const *addrs)
{
    s->curve = false;
    if (s->keys_dir[0] && s->insecure) return rl_set_error("--keys and --insecure exclude each other");
    if (s->keys_dir[0]) {
        if (rl_keys_load(s->keys_dir, &s->keys) != 0) return -1;
        s->curve = true;
        return 0;
    }
    if (s->insecure) return 0;
    for (int i = 0; addrs && addrs[i]; i++)
        if (!rl_addr_is_loopback(addrs[i]))
            return rl_set_error("multi-host runs are encrypted: pass --keys DIR (make one with tributary-agent "
                                "--make-keys DIR) or --insecure (%s is not a loopback address)", addrs[i]);
    return 0;
}
