export type Context = import("koishi").Context;
export type Session = import("koishi").Session;
export type Applier = import("./applier").Applier;
export type Reporter = import("./reporter").Reporter;
export type CommandOptions = {
    endpoint: string;
    token?: string | undefined;
    /**
     * requests with the plugin's caFile (default: the global fetch)
     */
    fetch?: import("./client").Fetch | undefined;
    /**
     * ms
     */
    requestTimeout: number;
    /**
     * explain, status, pins, drains, preview (and the root command)
     */
    readAuthority: number;
    /**
     * rebalance, pin, hold, unpin, drain, undrain
     */
    changeAuthority: number;
};
/**
 * Registers the commands.
 * @param {Context} ctx @param {CommandOptions} options
 * @param {{ applier: Applier, reporter: Reporter }} parts
 */
export function registerCommands(ctx: Context, options: CommandOptions, { applier, reporter }: {
    applier: Applier;
    reporter: Reporter;
}): void;
/**
 * The one bot of this Koishi that answers a command in a group, or null when none of them should
 * (another Koishi's bot holds the group). The same answer on every bot's session of one message,
 * since it is read from state they share:
 *
 * 1. the assignee of the group's row in Koishi's database (what this plugin applied, and what
 *    Koishi itself obeys; a row the plugin did not write stands for the service's assignee, see
 *    `Applier.disagreement`), else the service's assignee as the plugin last heard it: if that is
 *    an online bot of this Koishi, it answers; if it is a bot this Koishi does not run, none of
 *    ours does;
 * 2. otherwise (no assignee known, or ours but not online): the lowest id among this Koishi's
 *    online bots in the group (as reported to the service; all its online bots of the platform
 *    when it knows of none in the group).
 *
 * @param {Context} ctx @param {Applier} applier @param {Reporter} reporter
 * @param {string} platform @param {string} channel @param {string | undefined} row
 * @returns {string | null}
 */
export function designated(ctx: Context, applier: Applier, reporter: Reporter, platform: string, channel: string, row: string | undefined): string | null;
/**
 * Whether this session's bot answers the command: always in a direct chat, for a platform's own
 * command interaction and when the message mentions (at) this bot; never when it mentions
 * another bot; otherwise only the designated bot.
 * Koishi itself lets only the group's assignee (or the bot mentioned) run a command; this check
 * also holds where Koishi does not check, e.g. a plugin calling `session.execute` for every bot
 * that received a message.
 * @param {Context} ctx @param {Applier} applier @param {Reporter} reporter @param {Session} session
 */
export function answers(ctx: Context, applier: Applier, reporter: Reporter, session: Session): boolean;
/**
 * Orders bot ids the way people read them: numbers (QQ numbers) by value, others as text.
 * @param {string} a @param {string} b
 */
export function compareIds(a: string, b: string): number;
/**
 * The group a command is about: the argument (`123456`, or `platform:123456` for another
 * platform this Koishi has bots on), else the group the command was sent in.
 * @param {Context} ctx @param {Session} session @param {string | undefined} group
 * @returns {{ platform: string, channel: string } | null}
 */
export function parseTarget(ctx: Context, session: Session, group: string | undefined): {
    platform: string;
    channel: string;
} | null;
/** @typedef {import('koishi').Context} Context */
/** @typedef {import('koishi').Session} Session */
/** @typedef {import('./applier').Applier} Applier */
/** @typedef {import('./reporter').Reporter} Reporter */
/**
 * @typedef {object} CommandOptions
 * @property {string} endpoint
 * @property {string} [token]
 * @property {import('./client').Fetch} [fetch]  requests with the plugin's caFile (default: the global fetch)
 * @property {number} requestTimeout  ms
 * @property {number} readAuthority  explain, status, pins, drains, preview (and the root command)
 * @property {number} changeAuthority  rebalance, pin, hold, unpin, drain, undrain
 */
/** Reasons `GET /v1/explain` gives (others are shown as the service names them). */
export const REASONS: Set<string>;
/** Rebalance causes the service names (`/v1/status`'s `last_run.causes`). */
export const CAUSES: Set<string>;
/** The rules a dry run names for a move. */
export const RULES: Set<string>;
