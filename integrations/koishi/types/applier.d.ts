export type Context = import("koishi").Context;
export type Link = import("./client").Link;
export type ClientOptions = import("./client").ClientOptions;
export class Applier {
    /**
     * @param {Context} ctx
     * @param {ClientOptions & { reporter?: string, batchSize: number, retryMin: number, retryMax: number }} config
     *   reporter: named in the stream's URL (the service then counts the open stream as its sign of life)
     * @param {Link} link
     * @param {{ onReconnect?: () => void }} [hooks] onReconnect: the stream came back after a loss
     */
    constructor(ctx: Context, config: ClientOptions & {
        reporter?: string;
        batchSize: number;
        retryMin: number;
        retryMax: number;
    }, link: Link, hooks?: {
        onReconnect?: () => void;
    });
    ctx: import("koishi").Context;
    config: import("./client").ClientOptions & {
        reporter?: string;
        batchSize: number;
        retryMin: number;
        retryMax: number;
    };
    link: import("./client").Link;
    hooks: {
        onReconnect?: () => void;
    };
    /** @type {import('koishi').Logger} */
    logger: import("koishi").Logger;
    /** The service's assignment as last heard: platform → channel → bot ('' = unassigned).
     * @type {Map<string, Map<string, string>>} */
    desired: Map<string, Map<string, string>>;
    /** What Koishi's table holds, as far as this plugin knows: platform → channel → assignee
     * (null = no row). Dropped on every snapshot, so a resync re-reads the rows.
     * @type {Map<string, Map<string, string | null>>} */
    known: Map<string, Map<string, string | null>>;
    /** Platforms that had a bot at the last write pass. @type {Set<string>} */
    active: Set<string>;
    /** Rows left alone: an admin's `assign` whose pin the service has not taken yet
     * (platform:channel). @type {Set<string>} */
    held: Set<string>;
    /** The last foreign row logged per channel, so N bots' copies of a message log it once.
     * @type {Map<string, string>} */
    reported: Map<string, string>;
    /** @type {number | null} */
    version: number | null;
    /** bumped by every snapshot: a write pass of an older generation stops early */
    generation: number;
    dirty: boolean;
    writing: boolean;
    disposed: boolean;
    streamSleeper: Sleeper;
    writeSleeper: Sleeper;
    /** @type {AbortController | undefined} */
    current: AbortController | undefined;
    dbDown: boolean;
    /** @type {Promise<void> | undefined} */
    loop: Promise<void> | undefined;
    /** @type {Promise<void> | undefined} */
    writer: Promise<void> | undefined;
    refused: Once;
    start(): void;
    /**
     * The service's assignee of a channel as last heard on the stream: a bot id, '' (unassigned),
     * or undefined (the service has not named the channel).
     * @param {string} platform @param {string} channel @returns {string | undefined}
     */
    assigneeOf(platform: string, channel: string): string | undefined;
    /**
     * The service's assignee of a channel right after an operator change (a pin, a hold), before
     * the stream brings it: the row then follows it at once. A later stream event wins.
     * @param {string} platform @param {string} channel @param {string | null} assignee
     */
    expect(platform: string, channel: string, assignee: string | null): void;
    /** Read the row again and write it if it differs (someone may have written it).
     * @param {string} platform @param {string} channel */
    recheck(platform: string, channel: string): void;
    /** Leave this row as it is until `release` (an assign whose pin is not delivered yet).
     * @param {string} platform @param {string} channel */
    hold(platform: string, channel: string): void;
    /** @param {string} platform @param {string} channel */
    release(platform: string, channel: string): void;
    /**
     * A group message's row as Koishi just read it: undefined when it agrees with the service
     * (or the service has not named the channel, or the row is held), else the service's assignee,
     * which the caller puts in its place for this message. A row the plugin did not write is
     * also read again and written back.
     * @param {string} platform @param {string} channel @param {string} row
     * @returns {string | undefined}
     */
    disagreement(platform: string, channel: string, row: string): string | undefined;
    /**
     * Follows the stream until disposed. The stream names this Koishi's reporter
     * (`?reporter=`): while it is open the service counts the reporter alive, and when it closes
     * (a crash closes it at once) and does not come back within the service's
     * `sources.http.streamGrace` (0.5 s), the reporter's bots go offline. So a stream that drops
     * after it was in sync is opened again at once, without a word in the log unless that fails
     * too; only then the backoff (and the outage warning) takes over. At most one immediate
     * retry per `retryMin`: a stream that keeps dropping falls back to the backoff.
     */
    follow(): Promise<void>;
    /** The stream's path: it names this Koishi's reporter, whose sign of life it is. */
    streamPath(): string;
    /** @param {AbortController} controller */
    connect(controller: AbortController): Promise<Response>;
    /** @param {Response} res @param {AbortController} controller @param {() => void} onSynced */
    consume(res: Response, controller: AbortController, onSynced: () => void): Promise<void>;
    /**
     * One stream event. Returns true once in sync (a snapshot). Throws GapError on a skipped version.
     * @param {string} event @param {string} data
     */
    handle(event: string, data: string): boolean;
    /**
     * The whole assignment at `version`. Channels this plugin had assigned and the snapshot no
     * longer lists are unassigned; every row is compared with the table again.
     * @param {number} version @param {Record<string, Record<string, string | null>>} assignments
     */
    snapshot(version: number, assignments: Record<string, Record<string, string | null>>): void;
    /** @param {string} platform @param {Record<string, string | null>} assignments */
    change(platform: string, assignments: Record<string, string | null>): void;
    /** Something to write (or a platform got its first bot): run a write pass soon. */
    kick(): void;
    drain(): Promise<void>;
    /** Platforms this Koishi has a bot on. */
    platforms(): Set<string>;
    /** Make the table match `desired` for every platform this Koishi has a bot on. */
    pass(): Promise<void>;
    /** A newer snapshot arrived: this pass is moot, the next one starts over. @param {number} generation */
    stale(generation: number): boolean;
    dispose(): void;
}
/** The stream skipped a version: resync from a new snapshot. */
export class GapError extends Error {
}
/** A UNIQUE / duplicate-key violation, on SQLite, MySQL or PostgreSQL. @param {unknown} e */
export function isUnique(e: unknown): boolean;
import { Sleeper } from "./client";
import { Once } from "./client";
