export type Context = import("koishi").Context;
export type Link = import("./client").Link;
export type ClientOptions = import("./client").ClientOptions;
export class Applier {
    /**
     * @param {Context} ctx
     * @param {ClientOptions & { batchSize: number, retryMin: number, retryMax: number }} config
     * @param {Link} link
     * @param {{ onReconnect?: () => void }} [hooks] onReconnect: the stream came back after a loss
     */
    constructor(ctx: Context, config: ClientOptions & {
        batchSize: number;
        retryMin: number;
        retryMax: number;
    }, link: Link, hooks?: {
        onReconnect?: () => void;
    });
    ctx: import("koishi").Context;
    config: import("./client").ClientOptions & {
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
    follow(): Promise<void>;
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
