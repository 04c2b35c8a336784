/**
 * What the publisher says of a Redis outage: its start once at WARNING, every tenth retry, the
 * events dropped beyond the buffer's caps, and its end with what was delivered (publisher.ts).
 */

import { errorText } from "./replies.js";

import type { PluginLogger } from "./types.js";

export class OutageLog {
  private outage = false;
  private dropped = 0;
  private delivered = 0;
  private retries = 0;

  constructor(private readonly logger: PluginLogger) {}

  /** `count` oldest events dropped beyond the caps: the first of an outage said at WARNING. */
  droppedOverCaps(count: number, maxEvents: number, maxBytes: number): void {
    const first = this.dropped === 0;
    this.dropped += count;
    if (first) {
      this.logger.warn(
        `ovstream: turn buffer full (${maxEvents} events / ${maxBytes} bytes); ` +
          `dropping the oldest buffered turn events (${this.dropped} dropped so far)`,
      );
    } else {
      this.logger.debug?.(`ovstream: dropped ${count} more turn event(s) (${this.dropped} in this outage)`);
    }
  }

  deliveredOne(): void {
    this.delivered += 1;
  }

  /** A batch went through; with nothing `pending`, an outage ends (said once). */
  succeeded(pending: number): void {
    if (this.outage && pending === 0) {
      this.logger.info(
        `ovstream: Redis reachable again; delivered ${this.delivered} buffered turn event(s)` +
          (this.dropped > 0 ? `, ${this.dropped} were dropped while it was down` : ""),
      );
      this.outage = false;
      this.dropped = 0;
      this.retries = 0;
    }
    if (!this.outage) {
      this.delivered = 0;
    }
  }

  /** A batch failed with `err`, `pending` events buffered, the next try in `delayMs`. */
  failed(err: unknown, pending: number, delayMs: number): void {
    if (!this.outage) {
      this.outage = true;
      this.delivered = 0;
      this.logger.warn(
        `ovstream: cannot publish turn events to Redis (${errorText(err)}); ` +
          `buffering ${pending} event(s) in memory` +
          (this.dropped > 0 ? ` (${this.dropped} oldest dropped beyond the cap)` : "") +
          `, retrying in ${delayMs} ms`,
      );
      return;
    }
    this.retries += 1;
    const msg =
      `ovstream: Redis still unreachable (${errorText(err)}); ${pending} turn event(s) buffered, ` +
      `${this.dropped} dropped; next retry in ${delayMs} ms`;
    if (this.retries % 10 === 0) {
      this.logger.warn(msg);
    } else {
      this.logger.debug?.(msg);
    }
  }
}
