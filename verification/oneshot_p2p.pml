/* The p2p one-shot all-reduce (kernels/one_shot.cu, one_shot_call.cuh,
 * device_common.cuh), one block per rank, both protocols:
 *  - flags (runFlags): data into slot[phase][me] of every rank, then a flag
 *    holding callTag(call, signature) on every peer; take every peer's flag
 *    (wait, then clear it), reduce the slots in rank order;
 *  - LL (runLL): data and tag stored as one line into every peer; poll each
 *    peer's line for the tag, take the data, clear the line.
 * phase = call & 1; the call number comes from device memory (callNumber),
 * so a CUDA graph's replays number their calls as eager launches do.
 *
 * Mutations, each of which must make the check fail (verification/check.sh):
 *  FLAG_BEFORE_DATA  runFlags raises the flags before writing the slots
 *  ONE_PHASE         every call uses phase 0
 *  NO_CLEAR          runLL leaves a line's tag after reading it
 *  BAKED_CALL        the call number is fixed when the graph is captured */

#ifdef BAKED_CALL
#define CALL_OF(epoch) NEXT_CALL(EPOCH0)
#else
#define CALL_OF(epoch) NEXT_CALL(epoch)  /* one_shot_call.cuh:callNumber */
#endif
#include "common.pml"

/* device_common.cuh:takeFlag / waitForFlag with waitCheckPeer as giveUp:
 * the flag of `from` for this call, any other nonzero value (a different
 * call), the peer's first LL line when the budget looks at the clock
 * (one_shot_call.cuh:peerUsesOtherProtocol), or the bounded wait running
 * out: Promela's timeout is true only when no process can move, which is
 * when the real budget would expire with nothing ever arriving. */
inline takeFlag(at, why) {
  if
  :: flag[at] == tag -> flag[at] = 0
  :: flag[at] != 0 && flag[at] != tag -> why = MISMATCHED
  :: lineTag[at] != 0 -> why = MISMATCHED
  :: timeout -> why = TIMEDOUT
  fi
}

/* device_common.cuh:waitForLine, then runLL's clear of the line. */
inline takeLine(at, d, why) {
  if
  :: atomic { lineTag[at] == tag -> d = lineDat[at] };
#ifndef NO_CLEAR
     atomic { lineTag[at] = 0; lineDat[at] = 0 }
#endif
  :: lineTag[at] != 0 && lineTag[at] != tag -> why = MISMATCHED
  :: flag[at] != 0 -> why = MISMATCHED  /* device_common.cuh:peerFlagRaised */
  :: timeout -> why = TIMEDOUT
  fi
}

/* one_shot.cu:runFlags */
inline runFlags() {
#ifndef FLAG_BEFORE_DATA
  for (i : 0 .. N - 1) { p = (me + i) % N; maybeDie(); slot[IDX(p, phase, me)] = dat }  /* 1. */
#endif
  for (i : 1 .. N - 1) { p = (me + i) % N; maybeDie(); flag[IDX(p, phase, me)] = tag }  /* 2. */
#ifdef FLAG_BEFORE_DATA
  for (i : 0 .. N - 1) { p = (me + i) % N; maybeDie(); slot[IDX(p, phase, me)] = dat }
#endif
  for (r : 0 .. N - 1) {  /* 3. (__syncthreads_or: one failed wait fails the block) */
    if
    :: r != me && why == NOK -> takeFlag(IDX(me, phase, r), why)
    :: else -> skip
    fi
  }
  if
  :: why == NOK ->  /* 4. reduce in rank order */
    for (r : 0 .. N - 1) { d = slot[IDX(me, phase, r)]; expectRead(d, k, s, r); acc = acc + d }
  :: else -> skip
  fi
}

/* one_shot.cu:runLL */
inline runLL() {
  for (i : 1 .. N - 1) {  /* 1. */
    p = (me + i) % N; maybeDie();
    atomic { lineTag[IDX(p, phase, me)] = tag; lineDat[IDX(p, phase, me)] = dat }
  }
  for (r : 0 .. N - 1) {  /* 2. poll in rank order; the own unit comes from the input */
    if
    :: why != NOK -> skip
    :: why == NOK && r == me -> acc = acc + dat
    :: why == NOK && r != me ->
      takeLine(IDX(me, phase, r), d, why);
      if :: why == NOK -> expectRead(d, k, s, r); acc = acc + d :: else -> skip fi
    fi
  }
}

/* epoch: state[1 + block], the last call this block finished
 * (one_shot_call.cuh:finishCall stores it). */
proctype Rank(byte me) {
  byte k, s, call, phase, i, p, r, why, d;
  byte epoch = EPOCH0;
  int tag, dat, acc;
  kernelCalls();
gone: skip
}
