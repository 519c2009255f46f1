/* The transport under the sockets: tcp:// between hosts, ipc:// (a Unix
 * domain socket) between processes on one host. Every worker's router
 * binds its TCP endpoint and, unless TCP is forced, an ipc:// twin at a
 * path derived from that endpoint; a dealer connecting to a TCP endpoint
 * uses the twin when it exists (the way TensorPipe picks shared memory on
 * one host). The directory and the wire carry only TCP endpoints.
 *
 * The twin of tcp://HOST:PORT is /tmp/trib-rpc-UID/NETNS-HOST-PORT: UID
 * the user, NETNS the network namespace's inode. Only a process of the
 * same user in the same network namespace can have bound HOST:PORT and
 * made that file, so finding it means "same host". No state of its own:
 * pure functions of their arguments and the environment. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rpc/transport.h"

enum rpc_transport rpc_transport_resolve(enum rpc_transport t)
{
    if (t != RPC_TRANSPORT_AUTO) return t;
    const char *e = getenv("TRIB_RPC_TRANSPORT");
    if (e && strcmp(e, "tcp") == 0) return RPC_TRANSPORT_TCP;
    if (e && strcmp(e, "ipc") == 0) return RPC_TRANSPORT_IPC;
    if (e && strcmp(e, "shm") == 0) return RPC_TRANSPORT_SHM;
    return RPC_TRANSPORT_AUTO;
}

const char *rpc_transport_name(enum rpc_transport t)
{
    return t == RPC_TRANSPORT_TCP ? "tcp" : t == RPC_TRANSPORT_IPC ? "ipc" : t == RPC_TRANSPORT_SHM ? "shm" : "auto";
}

/* The directory of this user's twins: created 0700 if missing; false if it
 * is not a directory owned by this user that nobody else may write. */
static bool ipc_dir(char *out, size_t cap, bool create)
{
    snprintf(out, cap, "/tmp/trib-rpc-%u", (unsigned)getuid());
    if (create && mkdir(out, 0700) != 0 && errno != EEXIST) return false;
    struct stat st;
    return lstat(out, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() && (st.st_mode & 077) == 0;
}

/* A path that is a Unix socket. */
static bool is_socket(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

static unsigned long netns_inode(void)
{
    struct stat st;
    return stat("/proc/self/ns/net", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

bool rpc_ipc_twin(const char *tcp_ep, char *out, size_t cap, bool create_dir)
{
    if (strncmp(tcp_ep, "tcp://", 6) != 0) return false;
    const char *host = tcp_ep + 6, *colon = strrchr(host, ':');
    if (!colon || colon == host || !colon[1]) return false;
    char dir[64], h[80];
    size_t hl = (size_t)(colon - host);
    if (hl >= sizeof h) return false;
    for (size_t i = 0; i < hl; i++) {
        char c = host[i];
        h[i] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ? c : '_';
    }
    h[hl] = '\0';
    for (const char *p = colon + 1; *p; p++)
        if (*p < '0' || *p > '9') return false;        /* a wildcard port: no twin */
    if (!ipc_dir(dir, sizeof dir, create_dir)) return false;
    int n = snprintf(out, cap, "ipc://%s/%lu-%s-%s", dir, netns_inode(), h, colon + 1);
    /* sun_path holds 107 bytes */
    return n > 0 && (size_t)n < cap && n - 6 < 107;
}

/* Whether some socket of this network namespace listens on TCP port
 * `port` (/proc/net/tcp and tcp6, state 0A). */
static bool tcp_listening(unsigned port)
{
    static const char *const files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
    bool found = false;
    for (int k = 0; k < 2 && !found; k++) {
        FILE *f = fopen(files[k], "r");
        if (!f) continue;
        char line[512];
        while (!found && fgets(line, sizeof line, f)) {
            char local[80];
            unsigned st;
            if (sscanf(line, " %*d: %79s %*s %x", local, &st) != 2 || st != 0x0A) continue;
            const char *c = strrchr(local, ':');
            found = c && strtoul(c + 1, NULL, 16) == port;
        }
        fclose(f);
    }
    return found;
}

/* Removes the twins in dir, of this network namespace, whose TCP port no
 * process listens on any more (their worker was killed: nobody unlinked
 * them), and their shared-memory link sockets (TWIN.shm), so that the
 * directory does not fill up with dead sockets. */
static void remove_stale_twins(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%lu-", netns_inode());
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        const char *dash = strrchr(e->d_name, '-');
        char *end;
        unsigned long port = strtoul(dash + 1, &end, 10);
        /* NAME.shm: the socket shared-memory links are offered on (shm_links.c) */
        if ((*end && strcmp(end, ".shm") != 0) || port == 0 || port > 65535 || tcp_listening((unsigned)port)) continue;
        char path[320];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (is_socket(path)) unlink(path);
    }
    closedir(d);
}

int rpc_ipc_bind(void *router, const char *tcp_ep, enum rpc_transport t, char *ipc_ep, size_t cap)
{
    ipc_ep[0] = '\0';
    char ep[160];
    if (!rpc_ipc_twin(tcp_ep, ep, sizeof ep, t != RPC_TRANSPORT_TCP)) {
        if (t == RPC_TRANSPORT_IPC)
            return rpc_set_error("rpc_init: no ipc:// twin for %s (a wildcard address, or /tmp/trib-rpc-%u is not "
                                 "a private directory of this user)", tcp_ep, (unsigned)getuid());
        return 0;
    }
    /* a stale twin of an earlier process on this port would lead callers
     * to a socket nobody listens on */
    if (is_socket(ep + 6)) unlink(ep + 6);
    if (t == RPC_TRANSPORT_TCP) return 0;
    char dir[64];
    if (ipc_dir(dir, sizeof dir, false)) remove_stale_twins(dir);
    if (zmq_bind(router, ep) < 0) {
        if (t == RPC_TRANSPORT_IPC) return rpc_set_error("rpc_init: cannot bind %s: %s", ep, zmq_strerror(zmq_errno()));
        return 0;
    }
    snprintf(ipc_ep, cap, "%s", ep);
    return 0;
}

bool rpc_link_reconnects(int id, const char *via)
{
    bool on_this_host = strncmp(via, "ipc://", 6) == 0 || strncmp(via, "tcp://127.", 10) == 0 ||
                        strncmp(via, "tcp://localhost:", 16) == 0 || strncmp(via, "tcp://[::1]:", 12) == 0;
    return id == 0 || !on_this_host;
}

int rpc_connect_endpoint(const char *ep, enum rpc_transport t, char *via, size_t cap)
{
    char twin[160];
    bool have = t != RPC_TRANSPORT_TCP && rpc_ipc_twin(ep, twin, sizeof twin, false) && is_socket(twin + 6);
    if (t == RPC_TRANSPORT_IPC && !have)
        return rpc_set_error("rpc: cannot reach %s by ipc:// (forced): no socket at its twin (not on this host, "
                             "not started yet, or it does not listen on ipc)", ep);
    snprintf(via, cap, "%s", have ? twin : ep);
    return 0;
}

void rpc_ipc_unbind(const char *ipc_ep)
{
    if (ipc_ep[0] && is_socket(ipc_ep + 6)) unlink(ipc_ep + 6);
}

bool rpc_fd_peer(int fd, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) return false;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        port = ntohs(s4->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
        port = ntohs(s6->sin6_port);
    } else if (ss.ss_family == AF_UNIX) {
        struct ucred cr;
        socklen_t cl = sizeof cr;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0) return false;
        snprintf(buf, cap, "ipc pid %d", (int)cr.pid);
        return true;
    } else {
        return false;
    }
    snprintf(buf, cap, "%s:%d", ip, port);
    return true;
}
