/* The harness the three protocol models share: the ranks' call scripts,
 * the exchange regions, rank death, the per-call loop of the one-shot
 * kernels and the properties checked once every process has ended. Each
 * model (oneshot_p2p.pml, proxy.pml, device_api.pml) defines CALL_OF where
 * it uses kernelCalls(), includes this file, then defines runLL() and
 * runFlags() (or its own loop), proctype Rank(byte me) and, where it has
 * one, proctype Proxy(byte me); the init below runs them.
 *
 * Settings (spin -D...): NRANKS (2 or 3), NCALLS (3: results must stay
 * below ERR), EPOCH0 (the device call counter before the first call: 254
 * starts next to the 8-bit wrap), MISMATCH (rank NRANKS-1 makes another
 * call at the first or the last call index; with MISMATCH_NO_PUT, which the
 * device API model sets, one that puts nothing), DIES (the rank that may
 * die at any step; 255: nobody dies), GRAPH (every call is a replay of one
 * captured call: the same signature every time). */

#ifndef NRANKS
#define NRANKS 2
#endif
#ifndef NCALLS
#define NCALLS 3
#endif
#ifndef EPOCH0
#define EPOCH0 0
#endif
#ifndef DIES
#define DIES 255
#endif

#define N NRANKS
#define NOK 0        /* a wait ended with the peer's data */
#define MISMATCHED 1 /* kOneShotMismatch: the peer made another call */
#define TIMEDOUT 2   /* kOneShotTimeout (or abort): the budget ran out */
#define NONE 0       /* res: the call never ended (a dead rank) */
#define ERR 255      /* res: the call ended in an error */

/* Signatures (kernels/one_shot.cu:callSignature of count, type, op): 1 and 2
 * are two sizes under the LL limit, 3 a size over it (kernels/one_shot.cu:
 * oneShotGrid picks the protocol from the size alone). 0 (device API only):
 * the rank's kernel puts nothing in this call. */
#define IS_LL(s) ((s) == 1 || (s) == 2)

/* rcn_device::detail::nextCallNumber: the call after `last`, 0 skipped on
 * wrap-around (here the counter is 8 bits wide instead of 32). */
#define NEXT_CALL(last) (((last) + 1) % 256 == 0 -> 2 : ((last) + 1) % 256)

/* Where what rank `from` sends for `phase` lands in rank `owner`'s region:
 * RegionLayout::slotOffset / flagIndex / llSlotOffset (one block). */
#define IDX(owner, phase, from) (((owner) * 2 + (phase)) * N + (from))
/* phase = call & 1; the ONE_PHASE mutation uses one for every call. */
#ifdef ONE_PHASE
#define PHASE(c) 0
#else
#define PHASE(c) ((c) & 1)
#endif

#define SIG(r, k) ((r) * NCALLS + (k))
#define RES(r, k) ((r) * NCALLS + (k))

/* What rank r's input holds in call index k of signature s: different for
 * every (call, signature, rank), so a reader can tell whose data it summed. */
#define DATA(k, s, r) ((((k) + 1) * 4 + (s)) * 4 + (r))

byte sig[N * NCALLS];   /* the call rank r makes at index k */
byte res[N * NCALLS];   /* what it got: the sum, ERR or NONE */
bool failed[N];         /* the device `failed` word (state[0], ProxyState.failed, dev.failed) */
bool dead[N];
bool mismatched;        /* the scripts differ somewhere */
bool anyDead;

/* The exchange regions: [owner][phase][from] */
byte slot[N * 2 * N];    /* separate-flag data slots */
int flag[N * 2 * N];     /* flags: 0 or callTag(call, signature) */
int lineTag[N * 2 * N];  /* LL lines: the tag (both halves, stored whole) */
byte lineDat[N * 2 * N]; /*           and the data word */

/* A rank may die before any store it makes (its process, GPU work and
 * proxy thread stop together). */
inline maybeDie() {
  if
  :: dead[me] -> goto gone
  :: !dead[me] && me == DIES -> dead[me] = true; anyDead = true; goto gone
  :: !dead[me] -> skip
  fi
}

/* The end of a call: the sum, or the error recorded (recordFirstError sets
 * `failed`, and every later call of the rank does nothing: callNumber() 0). */
inline endCall(why, acc) {
  if
  :: why == NOK -> res[RES(me, k)] = acc
  :: else -> failed[me] = true; res[RES(me, k)] = ERR
  fi
}

inline chooseScript() {
  byte ci, cr, cs, odd;
  for (ci : 0 .. NCALLS - 1) {
#ifdef GRAPH
    if
    :: ci == 0 -> if :: cs = 1 :: cs = 3 fi
    :: else -> skip  /* a replay: the captured call's arguments again */
    fi;
#else
    if :: cs = 1 :: cs = 2 :: cs = 3 fi;
#endif
    for (cr : 0 .. N - 1) { sig[SIG(cr, ci)] = cs }
  }
#ifdef MISMATCH
  /* The last rank makes another call at one index: another size in the
   * same protocol or a size in the other protocol; (device API) no put. */
  if :: odd = 0 :: odd = NCALLS - 1 fi;
  cs = sig[SIG(N - 1, odd)];
#ifdef MISMATCH_NO_PUT
  sig[SIG(N - 1, odd)] = 0;
#else
  if
  :: cs != 1 -> sig[SIG(N - 1, odd)] = 1
  :: cs != 2 -> sig[SIG(N - 1, odd)] = 2
  :: cs != 3 -> sig[SIG(N - 1, odd)] = 3
  fi;
#endif
  mismatched = true
#endif
}

/* The properties that need every rank's outcome. */
inline checkOutcome() {
  byte pr, pk, qr;
  for (pr : 0 .. N - 1) {
    for (pk : 0 .. NCALLS - 1) {
      /* Every wait of a survivor ended: in a result or an error. */
      assert(dead[pr] || res[RES(pr, pk)] != NONE);
      /* Healthy runs (nobody died, the same calls) never fail. */
      assert(mismatched || anyDead || res[RES(pr, pk)] != ERR);
      /* Every rank that got a result got the same one. */
      for (qr : 0 .. N - 1) {
        assert(res[RES(pr, pk)] == NONE || res[RES(pr, pk)] == ERR || res[RES(qr, pk)] == NONE ||
               res[RES(qr, pk)] == ERR || res[RES(pr, pk)] == res[RES(qr, pk)])
      }
    }
  }
}

/* A rank's calls of a one-shot kernel (p2p and proxy): the call number
 * from the device counter (CALL_OF(epoch), which a mutation may change),
 * the phase, the tag (kernels/one_shot.h:callTag, or proxyLineTag: call and
 * signature; here call * 4 + signature, which never collides), then the
 * model's runLL() or runFlags(); a failed rank does nothing (callNumber() 0,
 * ProxyState.failed), and a successful call advances the counter. */
inline kernelCalls() {
  for (k : 0 .. NCALLS - 1) {
    if
    :: failed[me] -> res[RES(me, k)] = ERR
    :: else ->
      s = sig[SIG(me, k)];
      call = CALL_OF(epoch);
      phase = PHASE(call);
      tag = call * 4 + s;
      dat = DATA(k, s, me);
      acc = 0;
      why = NOK;
      if :: IS_LL(s) -> runLL() :: else -> runFlags() fi;
      endCall(why, acc);
      if :: why == NOK -> epoch = call :: else -> skip fi
    fi
  }
}

/* Every value a rank reads must be rank r's input of this call index and
 * signature: the property "no rank sums data of another call". */
inline expectRead(d, kk, s, r) { assert(d == DATA(kk, s, r)) }

init {
  byte ir;
  atomic {
    chooseScript();
    for (ir : 0 .. N - 1) { run Rank(ir) }
#ifdef HAS_PROXY
    for (ir : 0 .. N - 1) { run Proxy(ir) }
#endif
  }
  _nr_pr == 1;
  checkOutcome()
}
