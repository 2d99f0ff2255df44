export type Session = import("koishi").Session;
export type ClientOptions = import("./client").ClientOptions;
/** @typedef {import('koishi').Session} Session */
/** @typedef {import('./client').ClientOptions} ClientOptions */
/** The longest note the service keeps (its MAX_NOTE). */
export const MAX_NOTE: 500;
/**
 * Requests for one command (or one assign): a change sent to a follower answers 409 naming the
 * leader; it is sent there once more (not further: a leader that answers 409 in turn is
 * reported as it is), and so is every later request of the same command, so that it reads
 * what it has just changed.
 * @param {ClientOptions} options
 * @returns {(method: string, path: string, body?: unknown) => Promise<any>}
 */
export function serviceClient(options: ClientOptions): (method: string, path: string, body?: unknown) => Promise<any>;
/**
 * The number of the service's last rebalance (0: none yet), read before a change.
 * @param {(method: string, path: string) => Promise<any>} call
 */
export function lastRun(call: (method: string, path: string) => Promise<any>): Promise<number>;
/**
 * Waits (at most `timeout` ms) for the rebalance an operator's change asks for: the service
 * answers the change at once and plans it right after (without delay; until its first plan
 * after a start, with that plan). Reads made before it show the group as it was. Resolves with
 * whether it ran.
 * @param {(method: string, path: string) => Promise<any>} call @param {number} before
 * @param {number} timeout
 */
export function planned(call: (method: string, path: string) => Promise<any>, before: number, timeout: number): Promise<boolean>;
/**
 * The leader's API address a follower's 409 names, or null.
 * @param {unknown} e @returns {string | null}
 */
export function leaderOf(e: unknown): string | null;
/** Whether the error is a follower's 409 (with or without a leader's address). @param {unknown} e */
export function isFollower(e: unknown): boolean;
/** `/v1/pins/{platform}/{channel}` @param {string} platform @param {string} channel */
export function pinPath(platform: string, channel: string): string;
/** `/v1/drains/{platform}/{bot}` @param {string} platform @param {string} bot */
export function drainPath(platform: string, bot: string): string;
/**
 * A bot as a command names it: `1002`, `onebot:1002` or a mention (`<at id="1002"/>`). Null when
 * it is empty or of another platform than `platform`.
 * @param {string | undefined} text @param {string} platform @returns {string | null}
 */
export function parseBot(text: string | undefined, platform: string): string | null;
/**
 * Who made a change, for the note the service keeps with it (its audit log records only the
 * credential, the plugin's token): `onebot:12345 (Alice)`.
 * @param {Session} session
 */
export function author(session: Session): string;
/**
 * The note of a change made with a command: the user's note, and who made it through Koishi.
 * @param {Session} session @param {string | undefined} note
 */
export function authorNote(session: Session, note: string | undefined): string;
/**
 * The service's refusal of a change, in the user's words, or null when `e` is not one of the
 * refusals it names (the caller then uses `failure`). By the refusal's `code`; a service
 * before the codes is read by its message's text.
 * @param {Session} session @param {unknown} e
 * @param {{ platform?: string, channel?: string, bot?: string | null, until?: string }} about
 * @returns {string | null}
 */
export function refusal(session: Session, e: unknown, about: {
    platform?: string;
    channel?: string;
    bot?: string | null;
    until?: string;
}): string | null;
/**
 * A 403: the plugin's token has too low a role for this request (the service names the role it
 * needs; the changes need admin).
 * @param {Session} session @param {HttpError} e
 */
export function forbidden(session: Session, e: HttpError): string;
/**
 * A reply for a failed request to the service, in the user's locale (never thrown).
 * @param {Session} session @param {string} endpoint @param {unknown} e
 */
export function failure(session: Session, endpoint: string, e: unknown): string;
/**
 * `, until 2026-12-24T10:00:00Z` and ` (note: …)` for a reply, in the user's words ('' each
 * when there is none).
 * @param {Session} session @param {{ until?: string | null, note?: string | null }} change
 */
export function untilAndNote(session: Session, change: {
    until?: string | null;
    note?: string | null;
}): string;
import { HttpError } from "./client";
