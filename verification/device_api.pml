/* The device API's call epochs (include/rocenante/device.cuh), one block
 * per rank: rcnDeviceCall reads the call number (dev.calls + 1),
 * rcnDevicePut stores a unit (value low, call number high, one 8-byte
 * store) at [owner][phase][me] of every rank's window, rcnDeviceGather4
 * waits in rank order until each rank's unit carries this call and sums,
 * rcnDeviceEndCall stores the call back. Units are never cleared: a stale
 * unit carries an older call. The API has no signature, so the "different
 * call" made here is a kernel that skips its put (MISMATCH: signature 0);
 * ranks whose puts differ only in value are not told apart (see
 * docs/RELIABILITY.md, Protocol model).
 *
 * Mutations that must fail (verification/check.sh):
 *  ONE_PHASE   every call uses phase 0
 *  HOST_CALL   the call number is the one the host had at capture (a graph
 *              replay reuses it) instead of dev.calls in device memory */

#define MISMATCH_NO_PUT
#include "common.pml"

/* The windows: [owner][phase][from], one unit each. */
byte unitCall[N * 2 * N];
byte unitVal[N * 2 * N];

proctype Rank(byte me) {
  byte k, s, call, phase, i, p, r, why, d;
  byte calls = EPOCH0;  /* dev.calls[block] */
  int dat, acc;
  for (k : 0 .. NCALLS - 1) {
    if
    :: failed[me] -> res[RES(me, k)] = ERR  /* rcnDeviceCall returns 0 */
    :: else ->
      s = sig[SIG(me, k)];
#ifdef HOST_CALL
      call = NEXT_CALL(EPOCH0);
#else
      call = NEXT_CALL(calls);
#endif
      phase = PHASE(call);
      dat = DATA(k, s, me);
      acc = 0;
      why = NOK;
      if
      :: s != 0 ->  /* rcnDevicePut: every owner, starting at this rank */
        for (i : 0 .. N - 1) {
          p = (me + i) % N; maybeDie();
          atomic { unitCall[IDX(p, phase, me)] = call; unitVal[IDX(p, phase, me)] = dat }
        }
      :: else -> skip
      fi;
      for (r : 0 .. N - 1) {  /* rcnDeviceGather4: waitForGroups, rank by rank */
        if
        :: why == NOK ->
          if
          :: atomic { unitCall[IDX(me, phase, r)] == call -> d = unitVal[IDX(me, phase, r)] };
             /* this call's data from rank r (the writer's signature is
              * not the reader's to know: units carry none) */
             assert(d / 16 == k + 1 && d % 4 == r); acc = acc + d
          :: timeout -> why = TIMEDOUT  /* budget.check */
          fi
        :: else -> skip
        fi
      };
      endCall(why, acc);
      if :: why == NOK -> calls = call :: else -> skip fi  /* rcnDeviceEndCall */
    fi
  }
gone: skip
}
