/**
 * What an assign is about to do: the channel, the bot (null: `-r`, no assignee), the note.
 */
export type Intent = {
    platform: string;
    channel: string;
    bot: string | null;
    note: string;
};
/**
 * A pin waiting for the service: the assign, when the service first refused it, when the
 * service took it (then the queue waits for the plan that applies it) and the last rebalance
 * before, the requests' client.
 */
export type Queued = Intent & {
    refusedSince?: number;
    delivered?: number;
    before?: number;
    call?: (method: string, path: string, body?: unknown) => Promise<any>;
};
export type Context = import("koishi").Context;
export type Session = import("koishi").Session;
export type Applier = import("./applier").Applier;
export type Link = import("./client").Link;
export type ClientOptions = import("./client").ClientOptions;
/**
 * Hooks plugin-admin's `assign` and every message's channel row.
 * @param {Context} ctx
 * @param {ClientOptions & { retryMin: number, retryMax: number }} options
 * @param {{ applier: Applier, link: Link, reporter: import('./reporter').Reporter }} parts
 */
export function registerAssign(ctx: Context, options: ClientOptions & {
    retryMin: number;
    retryMax: number;
}, { applier, link, reporter }: {
    applier: Applier;
    link: Link;
    reporter: import("./reporter").Reporter;
}): {
    queue: PinQueue;
};
/**
 * What plugin-admin's `assign` will write, from its argv, or null where it writes nothing
 * (it answers "not in a group" or "another platform" itself).
 * @param {Session} session @param {Record<string, any>} options @param {unknown[]} args
 * @returns {Intent | null}
 */
export function intentOf(session: Session, options: Record<string, any>, args: unknown[]): Intent | null;
/**
 * Whether a command is plugin-admin's `assign` (not some other plugin's command of that name).
 * @param {any} command
 */
export function isAdminAssign(command: any): boolean;
/** Pins of assigns made while the service could not be reached, sent as soon as it answers. */
export class PinQueue {
    /**
     * @param {Context} ctx @param {ClientOptions & { retryMin: number, retryMax: number }} options
     * @param {Link} link @param {Applier} applier
     */
    constructor(ctx: Context, options: ClientOptions & {
        retryMin: number;
        retryMax: number;
    }, link: Link, applier: Applier);
    options: import("./client").ClientOptions & {
        retryMin: number;
        retryMax: number;
    };
    link: import("./client").Link;
    applier: import("./applier").Applier;
    /** @type {import('koishi').Logger} */
    logger: import("koishi").Logger;
    /** @type {Map<string, Queued>} */
    items: Map<string, Queued>;
    sleeper: Sleeper;
    disposed: boolean;
    /** @type {Promise<void> | undefined} */
    loop: Promise<void> | undefined;
    /** @param {Intent} intent */
    add(intent: Intent): void;
    run(): Promise<void>;
    dispose(): void;
}
import { Sleeper } from "./client";
