/**
 * The publisher's buffer: turn events not yet delivered, oldest first, bounded by count and
 * bytes, each also written to the spool directory (when there is one) until it is delivered
 * or dropped, so a process that exits with events buffered loses none (publisher.ts).
 */

import { mkdirSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { errorText } from "./replies.js";

import type { PluginLogger } from "./types.js";

/** What the publisher knows of an event besides its stream and payload. */
export interface EventTags {
  /** The event's (OV) session, for `pendingFor`. */
  session?: string;
  /** SET with the XADD, in the same pipeline: the session's newest turn. */
  lastTurn?: { key: string; eventId: string; ttlS: number };
}

export interface Pending extends EventTags {
  key: string;
  payload: string;
  bytes: number;
  /** Its spool file, removed once the event is delivered or dropped. */
  file?: string;
}

interface SpoolRecord extends EventTags {
  key: string;
  payload: string;
}

export class EventBuffer {
  private readonly queue: Pending[] = [];
  private head = 0;
  private spoolSeq = 0;
  /** Bytes of the events buffered (payloads and keys). */
  bytes = 0;

  constructor(
    private readonly spoolDir: string,
    private readonly logger: PluginLogger,
  ) {}

  get count(): number {
    return this.queue.length - this.head;
  }

  /** Buffer one event, spooled first (synchronously) when there is a spool directory. */
  add(key: string, payload: string, tags: EventTags): void {
    const file = this.spool({ key, payload, ...tags });
    this.push({ key, payload, bytes: Buffer.byteLength(payload, "utf8") + key.length, ...tags, file });
  }

  /** Payloads of the events still buffered for `session`, oldest first. */
  pendingFor(session: string): string[] {
    const out: string[] = [];
    for (let i = this.head; i < this.queue.length; i++) {
      const item = this.queue[i];
      if (item?.session === session) out.push(item.payload);
    }
    return out;
  }

  /** The oldest `size` events (still buffered until `taken`). */
  batch(size: number): Pending[] {
    return this.queue.slice(this.head, Math.min(this.queue.length, this.head + size));
  }

  /** `item` left the buffer (delivered, or refused for good): off the head, out of the spool. */
  taken(item: Pending | undefined): void {
    // The head may have moved if `dropOverCaps` dropped entries meanwhile.
    if (item && this.queue[this.head] === item) {
      this.head += 1;
      this.bytes -= item.bytes;
    }
    this.unspool(item);
  }

  /** Drop the oldest events while more than `maxEvents` or `maxBytes` are buffered (the newest
   * always stays); how many went. */
  dropOverCaps(maxEvents: number, maxBytes: number): number {
    let dropped = 0;
    while (this.count > 1 && (this.count > maxEvents || this.bytes > maxBytes)) {
      const old = this.queue[this.head];
      this.head += 1;
      if (old) {
        this.bytes -= old.bytes;
        this.unspool(old);
      }
      dropped += 1;
    }
    this.compact();
    return dropped;
  }

  /** Empty the buffer; each event left: its spool file's name, or "" for one in memory only. */
  clear(): string[] {
    const left = this.queue.slice(this.head).map((item) => item.file ?? "");
    this.queue.length = 0;
    this.head = 0;
    this.bytes = 0;
    return left;
  }

  compact(): void {
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
  }

  /** Events an earlier process spooled and did not deliver go first, oldest first; how many. */
  loadSpool(): number {
    const dir = this.spoolDir;
    if (!dir) return 0;
    let names: string[];
    try {
      names = readdirSync(dir).filter((n) => n.endsWith(".json")).sort();
    } catch {
      return 0; // no spool yet
    }
    let loaded = 0;
    for (const name of names) {
      try {
        const record = JSON.parse(readFileSync(join(dir, name), "utf8")) as SpoolRecord;
        if (typeof record.key !== "string" || typeof record.payload !== "string") throw new Error("not a spooled event");
        const bytes = Buffer.byteLength(record.payload, "utf8") + record.key.length;
        this.push({ ...record, bytes, file: name });
        loaded += 1;
      } catch (err) {
        this.logger.warn(`ovstream: spool file ${join(dir, name)} is unreadable (${errorText(err)}); left in place`);
      }
    }
    return loaded;
  }

  private push(item: Pending): void {
    this.queue.push(item);
    this.bytes += item.bytes;
  }

  private spool(record: SpoolRecord): string | undefined {
    const dir = this.spoolDir;
    if (!dir) return undefined;
    this.spoolSeq += 1;
    const name = `${Date.now().toString().padStart(15, "0")}-${process.pid}-${this.spoolSeq}.json`;
    try {
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, name), JSON.stringify(record), { mode: 0o600 });
      return name;
    } catch (err) {
      this.logger.warn(`ovstream: cannot spool a turn event to ${dir} (${errorText(err)}); it is kept in memory only`);
      return undefined;
    }
  }

  private unspool(item: Pending | undefined): void {
    if (!item?.file) return;
    try {
      unlinkSync(join(this.spoolDir, item.file));
    } catch {
      // another process delivered (and removed) it first
    }
    item.file = undefined;
  }
}
