/* A watchdog over calls that must not run forever (an env step of a
 * plug-in): arm it before the call, disarm it after; a call that stays
 * armed longer than the limit makes the watchdog's thread call
 * fire(user, seconds) once. Arming and disarming cost one clock read and
 * one atomic store, so they may wrap every step. One armed call at a time
 * (one thread arms it). */
#ifndef TRIB_COMMON_WATCHDOG_H
#define TRIB_COMMON_WATCHDOG_H

struct watchdog;

/* A watchdog with its thread, or NULL when limit_s <= 0 (no limit: arm and
 * disarm accept NULL and do nothing). fire runs on the watchdog's thread
 * and may not return (e.g. _exit). Aborts if the thread cannot start. */
struct watchdog *watchdog_new(double limit_s, void (*fire)(void *user, double seconds), void *user);
void watchdog_arm(struct watchdog *w);
void watchdog_disarm(struct watchdog *w);
/* Stops the thread and frees w (accepts NULL). Not while fire runs. */
void watchdog_free(struct watchdog *w);

#endif
