/* The proxy path (transport/proxy/proxy_kernel.cu, proxy_engine.cc), one
 * block and one proxy lane per rank. The kernel stages its data in its own
 * region and rings a doorbell; the rank's proxy thread forwards it over the
 * wire to the same place in every peer's region.
 *  - flags (runFlags): stage the slot, fence, ring; the proxy puts the slot
 *    and then the flag callTag(call, signature) (putWithFlag: the wire lands
 *    the data before the flag); the kernel takes every peer's flag, reduces.
 *  - LL (runLL): ring first, then store the own lines tagged
 *    proxyLineTag(call, signature); the proxy waits until every line carries
 *    the call (linesArrived) and puts them; the kernel polls the peers' lines.
 *    Lines are never cleared: a stale line carries an older call.
 *  - STAGED (kProxyLLStaged, a communicator-wide choice): store the lines,
 *    fence, then ring; the proxy puts the lines unread.
 * The call number is ProxyState.epoch + 1, in device memory.
 *
 * Mutations that must fail (verification/check.sh):
 *  RING_BEFORE_STAGE  runFlags rings the doorbell before staging its slot
 *  FLAG_BEFORE_DATA   the proxy puts the flag before the data
 *  ONE_PHASE          every call uses phase 0 (data slots and doorbells) */

#define HAS_PROXY
#define CALL_OF(epoch) NEXT_CALL(epoch)  /* proxy_kernel.cu:proxyKernel */
#include "common.pml"

#define FLAGS_PROTO 0
#define LL_PROTO 1
/* proxyLineCall: the call half of a line's tag (15 bits in the code, the
 * whole 8-bit call here: the model makes too few calls to need the scrub). */
#define CALL_HALF(t) ((t) / 4)

/* The doorbell of (rank, phase): ProxyDoorbell, whose fields each carry the
 * call; the proxy trusts them once all do, so one atomic store here. */
byte bellCall[N * 2];
byte bellSig[N * 2];
byte bellProto[N * 2];
bool kernelEnded[N];  /* the rank's stream is done: its proxy stops (ProxyEngine::stop) */

inline ring(proto) {
  maybeDie();
  atomic { bellCall[me * 2 + phase] = call; bellSig[me * 2 + phase] = s; bellProto[me * 2 + phase] = proto }
}

/* proxy_kernel.cu:takePeerFlag, the peek of peerUsesOtherProtocol (the
 * peer's first line of this phase carrying this call) and the budget. */
inline takeFlag(at, why) {
  if
  :: flag[at] == tag -> flag[at] = 0
  :: flag[at] != 0 && flag[at] != tag -> why = MISMATCHED
  :: CALL_HALF(lineTag[at]) == call -> why = MISMATCHED
  :: timeout -> why = TIMEDOUT
  fi
}

/* proxy_kernel.cu:waitForLinePair: a tag of this call with another
 * signature (otherCallsTag) is a mismatch; older tags are stale. */
inline takeLine(at, d, why) {
  if
  :: atomic { lineTag[at] == tag -> d = lineDat[at] }
  :: lineTag[at] != tag && CALL_HALF(lineTag[at]) == call -> why = MISMATCHED
  :: flag[at] != 0 -> why = MISMATCHED  /* peerFlagRaised */
  :: timeout -> why = TIMEDOUT
  fi
}

inline runFlags() {
#ifdef RING_BEFORE_STAGE
  ring(FLAGS_PROTO);
  maybeDie(); slot[IDX(me, phase, me)] = dat;
#else
  maybeDie(); slot[IDX(me, phase, me)] = dat;  /* 1. stage */
  ring(FLAGS_PROTO);                           /* 2. fence, ring */
#endif
  for (r : 0 .. N - 1) {                       /* 3. */
    if
    :: r != me && why == NOK -> takeFlag(IDX(me, phase, r), why)
    :: else -> skip
    fi
  }
  if
  :: why == NOK ->  /* 4. own contribution from the input */
    for (r : 0 .. N - 1) {
      if
      :: r == me -> acc = acc + dat
      :: else -> d = slot[IDX(me, phase, r)]; expectRead(d, k, s, r); acc = acc + d
      fi
    }
  :: else -> skip
  fi
}

inline runLL() {
#ifndef STAGED
  ring(LL_PROTO);  /* 1. */
#endif
  maybeDie();      /* 2. */
  atomic { lineTag[IDX(me, phase, me)] = tag; lineDat[IDX(me, phase, me)] = dat };
#ifdef STAGED
  ring(LL_PROTO);
#endif
  for (r : 0 .. N - 1) {  /* 3. */
    if
    :: why != NOK -> skip
    :: why == NOK && r == me -> acc = acc + dat
    :: why == NOK && r != me ->
      takeLine(IDX(me, phase, r), d, why);
      if :: why == NOK -> expectRead(d, k, s, r); acc = acc + d :: else -> skip fi
    fi
  }
}

/* epoch: ProxyState.epoch, which the call's last block advances. */
proctype Rank(byte me) {
  byte k, s, call, phase, r, why, d;
  byte epoch = EPOCH0;
  int tag, dat, acc;
  kernelCalls();
gone: kernelEnded[me] = true
}

/* ProxyEngine::loop for one lane: serve the doorbell of the call it expects
 * (Lane.call), then the next. */
proctype Proxy(byte me) {
  byte pc = NEXT_CALL(EPOCH0), phase, i, p, s, proto, d;
  int tag;
  do
  :: dead[me] -> break
  :: atomic { bellCall[me * 2 + PHASE(pc)] == pc ->
       phase = PHASE(pc); s = bellSig[me * 2 + phase]; proto = bellProto[me * 2 + phase] };
     tag = pc * 4 + s;
     if
     :: proto == FLAGS_PROTO ->  /* forward(): payload, then flag, to every peer */
       for (i : 1 .. N - 1) {
         p = (me + i) % N;
#ifdef FLAG_BEFORE_DATA
         maybeDie(); flag[IDX(p, phase, me)] = tag;
         maybeDie(); slot[IDX(p, phase, me)] = slot[IDX(me, phase, me)]
#else
         maybeDie(); slot[IDX(p, phase, me)] = slot[IDX(me, phase, me)];
         maybeDie(); flag[IDX(p, phase, me)] = tag
#endif
       }
     :: else ->
#ifndef STAGED
       /* forwardLines: wait for the kernel's lines (linesArrived); on its
        * deadline the engine fails and aborts (both end the wait here). */
       if
       :: CALL_HALF(lineTag[IDX(me, phase, me)]) == pc -> skip
       :: timeout -> break
       fi;
#endif
       for (i : 1 .. N - 1) {  /* putToPeers: the line as it is now */
         p = (me + i) % N;
         maybeDie();
         atomic { lineTag[IDX(p, phase, me)] = lineTag[IDX(me, phase, me)];
                  lineDat[IDX(p, phase, me)] = lineDat[IDX(me, phase, me)] }
       }
     fi;
     pc = NEXT_CALL(pc)
  :: kernelEnded[me] && bellCall[me * 2 + PHASE(pc)] != pc -> break
  od;
gone: skip
}
