export type Context = import("koishi").Context;
export type Bot = import("koishi").Bot;
export type Link = import("./client").Link;
export type ClientOptions = import("./client").ClientOptions;
export type FleetEvent = {
    type: "online";
    platform: string;
    id: string;
    channels: string[];
} | {
    type: "offline";
    platform: string;
    id: string;
} | {
    type: "joined" | "left";
    platform: string;
    id: string;
    channel: string;
} | {
    type: "messages";
    platform: string;
    counts: Record<string, number>;
};
/**
 * What the service knows (or will know once the queue is sent) about one bot.
 */
export type BotState = {
    platform: string;
    id: string;
    /**
     * reported online, with `channels`
     */
    online: boolean;
    channels: Set<string>;
    /**
     * bumped by every status change; a guild-list fetch of an older epoch is dropped
     */
    epoch: number;
    /**
     * joins/leaves seen while the guild list is being fetched
     */
    pending: null | Array<["+" | "-", string]>;
};
export class Reporter {
    /**
     * @param {Context} ctx
     * @param {ClientOptions & { reporter: string, heartbeatInterval: number, retryMin: number, retryMax: number,
     *   messageReportInterval?: number }} config  messageReportInterval in seconds, 0: no message counts
     * @param {Link} link
     */
    constructor(ctx: Context, config: ClientOptions & {
        reporter: string;
        heartbeatInterval: number;
        retryMin: number;
        retryMax: number;
        messageReportInterval?: number;
    }, link: Link);
    ctx: import("koishi").Context;
    config: import("./client").ClientOptions & {
        reporter: string;
        heartbeatInterval: number;
        retryMin: number;
        retryMax: number;
        messageReportInterval?: number;
    };
    link: import("./client").Link;
    /** @type {import('koishi').Logger} */
    logger: import("koishi").Logger;
    path: string;
    /** @type {Map<string, BotState>} */
    bots: Map<string, BotState>;
    /** @type {FleetEvent[]} */
    queue: FleetEvent[];
    /** the service does not know our state: PUT it (first contact, 409, after a failure) */
    needsFull: boolean;
    heartbeatDue: boolean;
    started: boolean;
    disposed: boolean;
    abort: AbortController;
    sleeper: Sleeper;
    /** @type {Promise<void> | undefined} */
    loop: Promise<void> | undefined;
    refused: Once;
    /** ms between two message reports; 0: messages are not counted */
    messageInterval: number;
    messages: MessageCounter | null;
    /** when message counts last went out */
    messagesSentAt: number;
    /** Called after each full state the service took (its first, after a 409, after an outage).
     * @type {Set<() => void>} */
    reported: Set<() => void>;
    /** Report every bot Koishi has now, then follow events. Call on `ready`. */
    start(): Promise<void>;
    /** login-added / login-updated: the bot is there; report its status. @param {Bot} bot */
    onLogin(bot: Bot): void;
    /** login-removed: the bot is gone. @param {Bot} bot */
    onLogout(bot: Bot): void;
    /** The bot itself joined (`+`) or left (`-`) a guild. Idempotent: satori emits some events
     * under two names. @param {Bot} bot @param {'+' | '-'} op @param {string} guildId */
    onGuild(bot: Bot, op: "+" | "-", guildId: string): void;
    /**
     * A message Koishi received. Counted if it is a group message, received by a bot this plugin
     * reports, and not sent by one of them: a bot's own messages (OneBot's `message_sent` echo,
     * or one of our bots' replies as another of our bots receives it) are what this Koishi says,
     * not traffic it has to answer, and counting a reply only where a second bot of ours happens
     * to be in the group would make the weight depend on the fleet. Counted by the guild id: the
     * id reported as the channel (on OneBot the group number, the same as the channel id).
     *
     * Counted by the process that answers it, so that several processes in one group count
     * each message once: not when the group's assignee is a bot of another process (that
     * process counts it), nor when it is a bot of ours that is offline (nobody here answers; a
     * claim elsewhere, or the assignee the service picks next, counts it). Unassigned groups
     * are counted.
     * @param {import('koishi').Session} session
     * @param {string | undefined} assignee the group's assignee as the stream last said ('' or
     *   undefined: none)
     */
    onMessage(session: import("koishi").Session, assignee: string | undefined): void;
    /**
     * This Koishi's bots that are online and, as far as this reporter knows (guild lists, joins
     * and leaves), in `channel`.
     * @param {string} platform @param {string} channel @returns {string[]}
     */
    membersOf(platform: string, channel: string): string[];
    /** The service may have forgotten us (the stream reconnected): heartbeat now; 409 → PUT. */
    probe(): void;
    /** @param {string} platform @param {string} id */
    state(platform: string, id: string): BotState;
    /** @param {Bot} bot @param {BotState} s */
    goOnline(bot: Bot, s: BotState): Promise<void>;
    /** @param {BotState} s */
    goOffline(s: BotState): void;
    /**
     * Every guild id of the bot, all pages. A bot that cannot list its guilds is reported with
     * none (it still gets the groups it joins later); a failing list is retried twice.
     * @param {Bot} bot @returns {Promise<string[]>}
     */
    listGuilds(bot: Bot): Promise<string[]>;
    /** @param {FleetEvent} event */
    send(event: FleetEvent): void;
    fullState(): {
        bots: {
            platform: string;
            id: string;
            online: boolean;
            channels: string[];
        }[];
    };
    run(): Promise<void>;
    /** When the pending message counts may go out (Infinity: none pending). */
    messagesAt(): number;
    flushOnce(): Promise<void>;
    /**
     * Message counts whose request failed. They are kept, and sent with the next request that
     * can carry them (after the PUT that a 409 or a failure calls for), except when the service
     * refused a request that carried nothing else: the same counts would be refused again.
     *
     * * 409: the service checks the reporter before it applies any event of a request, so none
     *   of these counts was added: sending them again counts them exactly once. A 409 loop
     *   (PUT, then 409 again) cannot add them twice either.
     * * No answer (connection lost, timeout, 5xx): the service may or may not have added them.
     *   Sending them again counts them twice in the rare case it had (a request that timed out
     *   after the service applied it); dropping them would lose them in the common case (the
     *   service down, or restarting). A weight is a day-long average, so one report too many
     *   after an outage is the smaller error.
     * @param {import('./messages').Counts} taken @param {unknown} e @param {boolean} withFleet
     */
    unsent(taken: import("./messages").Counts, e: unknown, withFleet: boolean): void;
    conflict(): void;
    /** Stop, then tell the service our bots are gone (DELETE), without waiting for the grace period. */
    dispose(): Promise<void>;
}
import { Sleeper } from "./client";
import { Once } from "./client";
import { MessageCounter } from "./messages";
