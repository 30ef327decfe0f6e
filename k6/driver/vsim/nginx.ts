/**
 * nginx's two upstream choices in the simulator, in front of engines directly: calls are never
 * held back, so they wait in the engines' queues and a full queue answers 429 to the client.
 *
 * - round-robin: nginx's default smooth weighted round-robin, which with equal weights is a plain
 *   rotation over the upstreams in their configured order.
 * - least_conn: the upstream with the fewest active requests (sent and not yet answered to the
 *   end, queued ones included); several with the fewest are chosen between by the same smooth
 *   weighted round-robin, restricted to them, as nginx's least_conn module does.
 */

/** Picks an upstream for each call and hears when its answer is over. */
export interface UpstreamBalancer {
  /** The upstream index for the next call; counted as active until {@link done}. */
  pick(): number;
  /** The call sent to `upstream` was answered in full (or refused). */
  done(upstream: number): void;
}

/** The two contenders' names as the placement scenario reports them, with their balancers. */
export const NGINX_BALANCERS: Readonly<Record<string, (upstreams: number) => UpstreamBalancer>> = Object.freeze({
  'nginx round-robin': (n: number) => nginxRoundRobin(n),
  'nginx least_conn': (n: number) => nginxLeastConn(n),
});

/** nginx's round-robin over `upstreams` equal servers: the first, the second, ..., and round again. */
export function nginxRoundRobin(upstreams: number): UpstreamBalancer {
  let next = 0;
  return {
    pick() {
      const chosen = next;
      next = (next + 1) % upstreams;
      return chosen;
    },
    done() {},
  };
}

/**
 * nginx's least_conn over `upstreams` equal servers. Ties go by smooth weighted round-robin among
 * the tied: each tied server's current weight grows by its weight (1), the highest (the first in
 * order on equal weights) is chosen, and its current weight drops by the sum of the tied weights.
 */
export function nginxLeastConn(upstreams: number): UpstreamBalancer {
  const active = new Array<number>(upstreams).fill(0);
  const current = new Array<number>(upstreams).fill(0);
  return {
    pick() {
      let fewest = Infinity;
      let ties = 0;
      for (const count of active) {
        if (count < fewest) {
          fewest = count;
          ties = 1;
        } else if (count === fewest) ties++;
      }
      let chosen = -1;
      for (let i = 0; i < upstreams; i++) {
        if (active[i] !== fewest) continue;
        if (ties === 1) {
          chosen = i;
          break;
        }
        current[i]! += 1;
        if (chosen < 0 || current[i]! > current[chosen]!) chosen = i;
      }
      if (ties > 1) current[chosen]! -= ties;
      active[chosen]! += 1;
      return chosen;
    },
    done(upstream: number) {
      active[upstream]! -= 1;
    },
  };
}
