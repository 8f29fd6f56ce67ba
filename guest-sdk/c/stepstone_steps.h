// Stepstone steps in C: list your steps in STEPSTONE_STEPS and this module
// implements the `steps` world's exports (`describe`, `run-step`) over that
// table, on top of the bindings `wit-bindgen c --world steps` generates.
//
// A step reads its input (JSON text, not NUL-terminated) and writes its
// output (JSON text) with stepstone_write / stepstone_print, or fails with
// stepstone_fail (all in stepstone_guest.h).
#ifndef STEPSTONE_STEPS_H
#define STEPSTONE_STEPS_H

#include "stepstone_guest.h"

typedef stepstone_fn stepstone_step_fn;
typedef stepstone_export stepstone_step;

// The component's steps, ended by {NULL, NULL}: defined by the step author.
extern const stepstone_step STEPSTONE_STEPS[];

// Which attempt this is, starting at 1.
uint32_t stepstone_attempt(void);

// This call's idempotency key, NUL-terminated, in memory of its own (free
// it): the same for every attempt of the call, on any host, and for no
// other call of any tenant. Send it as a service's `Idempotency-Key`, so a
// request an earlier attempt got through is not done twice. It is
// `{tenant}/{run}/{seq}`, or `{tenant}/{run}/{incarnation}/{seq}` for a run
// whose id was used before (retention deleted an earlier run of it), so a
// service never answers it with the earlier run's result.
char *stepstone_idempotency_key(void);

// A number that only rises as the run passes from host to host, and from
// one incarnation of its id to the next: send it with the idempotency key
// (say as `Fencing-Token`) to a service that keeps the highest it saw for
// each key and refuses a lower one.
uint64_t stepstone_fencing_token(void);

#endif
