// @ts-check
'use strict'
// The operator's side of the service's API (issue 59): pins, holds, drains and the dry run, as
// the chat commands (src/commands.js) and Koishi's own `assign` (src/assign.js) use them.
//
// * `serviceClient`: a command's requests; a follower's 409, which names the leader's API
//   address, is sent once more to that leader (the service's command line does the same), and
//   the rest of the same command goes there too.
// * `refusal`: the service's refusals (404 unknown platform, group or bot, nothing to end; 409
//   not a member, naming the members; 400 a bad `until` or note; 403 a token of too low a
//   role) in the user's words, told apart by the stable `code` the service gives each (by
//   their English text from services before it); `failure`: every other error (unreachable,
//   token, …), never thrown at the user.
// * `parseBot`, `authorNote`: what a command names, and who a change is recorded as made by.

const { HttpError, NetworkError, isForbidden, neededRole, request } = require('./client')

/** @typedef {import('koishi').Session} Session */
/** @typedef {import('./client').ClientOptions} ClientOptions */

/** The longest note the service keeps (its MAX_NOTE). */
const MAX_NOTE = 500

/**
 * The leader's API address a follower's 409 names, or null.
 * @param {unknown} e @returns {string | null}
 */
function leaderOf(e) {
  if (!(e instanceof HttpError) || e.status !== 409) return null
  const api = e.body?.leader?.api
  return typeof api === 'string' && /^https?:\/\//.test(api) ? api : null
}

/** Whether the error is a follower's 409 (with or without a leader's address). @param {unknown} e */
function isFollower(e) {
  return e instanceof HttpError && e.status === 409 &&
    (e.code === 'following' || (!!e.body && typeof e.body === 'object' && 'leader' in e.body))
}

/**
 * Requests for one command (or one assign): a change sent to a follower answers 409 naming the
 * leader; it is sent there once more (not further: a leader that answers 409 in turn is
 * reported as it is), and so is every later request of the same command, so that it reads
 * what it has just changed.
 * @param {ClientOptions} options
 * @returns {(method: string, path: string, body?: unknown) => Promise<any>}
 */
function serviceClient(options) {
  /** @type {string | null} */
  let leader = null
  // A change is answered once the service has stored it, or after 5 s with 202 when its
  // database does not answer: a shorter requestTimeout would call that a failure.
  const changes = { ...options, requestTimeout: Math.max(options.requestTimeout ?? 0, CHANGE_TIMEOUT_MS) }
  return async (method, path, body) => {
    const o = method === 'GET' ? options : changes
    if (leader) return atLeader(o, leader, method, path, body)
    try {
      return await request(o, method, path, body)
    } catch (e) {
      const api = leaderOf(e)
      if (!api) throw e
      leader = api
      return atLeader(o, api, method, path, body)
    }
  }
}

/**
 * @param {ClientOptions} options @param {string} leader @param {string} method @param {string} path
 * @param {unknown} [body]
 */
async function atLeader(options, leader, method, path, body) {
  try {
    return await request({ ...options, endpoint: leader }, method, path, body)
  } catch (e) {
    if (e instanceof NetworkError) throw new NetworkError(`the leader ${leader}: ${e.message}`)
    throw e
  }
}

/** How long a change may take to be answered: the service waits up to 5 s for its database
 * to store it (then answers 202), plus the way there and back. */
const CHANGE_TIMEOUT_MS = 10_000

/** How often `planned` looks whether the operator's rebalance has run. */
const POLL_MS = 50

/**
 * The number of the service's last rebalance (0: none yet), read before a change.
 * @param {(method: string, path: string) => Promise<any>} call
 */
async function lastRun(call) {
  const status = await call('GET', '/v1/status')
  return Number(status?.last_run?.number ?? 0)
}

/**
 * Waits (at most `timeout` ms) for the rebalance an operator's change asks for: the service
 * answers the change at once and plans it right after (without delay; until its first plan
 * after a start, with that plan). Reads made before it show the group as it was. Resolves with
 * whether it ran.
 * @param {(method: string, path: string) => Promise<any>} call @param {number} before
 * @param {number} timeout
 */
async function planned(call, before, timeout) {
  const deadline = Date.now() + timeout
  for (;;) {
    const run = (await call('GET', '/v1/status'))?.last_run
    if (run && run.number > before && /(^|, )operator( |,|$)/.test(String(run.causes))) return true
    if (Date.now() >= deadline) return false
    await new Promise(resolve => setTimeout(resolve, POLL_MS))
  }
}

/** `/v1/pins/{platform}/{channel}` @param {string} platform @param {string} channel */
function pinPath(platform, channel) {
  return `/v1/pins/${encodeURIComponent(platform)}/${encodeURIComponent(channel)}`
}

/** `/v1/drains/{platform}/{bot}` @param {string} platform @param {string} bot */
function drainPath(platform, bot) {
  return `/v1/drains/${encodeURIComponent(platform)}/${encodeURIComponent(bot)}`
}

/**
 * A bot as a command names it: `1002`, `onebot:1002` or a mention (`<at id="1002"/>`). Null when
 * it is empty or of another platform than `platform`.
 * @param {string | undefined} text @param {string} platform @returns {string | null}
 */
function parseBot(text, platform) {
  let t = String(text ?? '').trim()
  const at = /^<at\b[^>]*?\bid="([^"]*)"[^>]*?\/?>(?:<\/at>)?$/.exec(t)
  if (at) t = at[1].trim()
  const colon = t.indexOf(':')
  if (colon > 0) {
    if (t.slice(0, colon) !== platform) return null
    t = t.slice(colon + 1)
  }
  return t && !/[\s<>]/.test(t) ? t : null
}

/**
 * Who made a change, for the note the service keeps with it (its audit log records only the
 * credential, the plugin's token): `onebot:12345 (Alice)`.
 * @param {Session} session
 */
function author(session) {
  const name = session.username && session.username !== session.userId ? ` (${session.username})` : ''
  return `${session.platform}:${session.userId ?? '?'}${name}`
}

/**
 * The note of a change made with a command: the user's note, and who made it through Koishi.
 * @param {Session} session @param {string | undefined} note
 */
function authorNote(session, note) {
  const by = `by ${author(session)} via Koishi`
  const given = String(note ?? '').trim()
  return given ? `${given} (${by})` : by
}

/**
 * The service's refusal of a change, in the user's words, or null when `e` is not one of the
 * refusals it names (the caller then uses `failure`). By the refusal's `code`; a service
 * before the codes is read by its message's text.
 * @param {Session} session @param {unknown} e
 * @param {{ platform?: string, channel?: string, bot?: string | null, until?: string }} about
 * @returns {string | null}
 */
function refusal(session, e, about) {
  if (!(e instanceof HttpError)) return null
  const t = (/** @type {string} */ key, /** @type {object} */ params = {}) => session.text('auto-assign.refusal.' + key, params)
  const members = (/** @type {string[]} */ list) => list.length ? list.join(session.text('auto-assign.separator')) : t('no-members')
  if (isForbidden(e)) return forbidden(session, e)
  switch (e.code) {
    case 'unknown_platform': return t('unknown-platform', { platform: about.platform ?? /^unknown platform "(.*)"/.exec(e.detail)?.[1] ?? '' })
    case 'unknown_channel': return t('unknown-group', { channel: about.channel ?? / being in (.*)$/.exec(e.detail)?.[1] ?? '' })
    case 'unknown_bot': return t('unknown-bot', { bot: about.bot ?? /^no bot (\S+) is known/.exec(e.detail)?.[1] ?? '' })
    case 'nothing_to_end':
      return /^\/v1\/drains\//.test(e.path) || (!/^\/v1\/pins\//.test(e.path) && / has no drain$/.test(e.detail))
        ? t('not-drained', { bot: about.bot ?? '' })
        : t('not-pinned', { channel: about.channel ?? '' })
    case 'not_a_member': {
      const list = Array.isArray(e.body?.members) ? e.body.members.map(String) : []
      const m = /^(\S+) is not in (\S+);/.exec(e.detail)
      return t('not-member', { bot: about.bot ?? m?.[1] ?? '', channel: about.channel ?? m?.[2] ?? '', members: members(list) })
    }
    case 'following': return t('follower', { detail: e.detail || '-' })
    case 'invalid_until': return t('bad-until', { until: about.until ?? '' })
    case 'invalid_note': return t('bad-note', { max: MAX_NOTE })
    case 'invalid_bot': return t('bad-bot', { bot: about.bot ?? '' })
  }
  if (e.code) return null
  // a service before the codes: its English messages
  const detail = e.detail ?? ''
  if (e.status === 404) {
    let m
    if ((m = /^unknown platform "(.*)"/.exec(detail))) return t('unknown-platform', { platform: m[1] })
    if ((m = /^no bot of the fleet reported being in (.*)$/.exec(detail))) return t('unknown-group', { channel: about.channel ?? m[1] })
    if ((m = /^no bot (\S+) is known$/.exec(detail))) return t('unknown-bot', { bot: about.bot ?? m[1] })
    if (/ has no pin$/.test(detail)) return t('not-pinned', { channel: about.channel ?? '' })
    if (/ has no drain$/.test(detail)) return t('not-drained', { bot: about.bot ?? '' })
    return null
  }
  if (e.status === 409) {
    if (isFollower(e)) return t('follower', { detail })
    const m = /^(\S+) is not in (\S+); its members: ?(.*)$/.exec(detail)
    if (m) {
      return t('not-member', {
        bot: about.bot ?? m[1],
        channel: about.channel ?? m[2],
        members: members(m[3].split(',').map(s => s.trim()).filter(Boolean)),
      })
    }
    return null
  }
  if (e.status === 400) {
    if (/^until: /.test(detail)) return t('bad-until', { until: about.until ?? '' })
    if (/^note: /.test(detail)) return t('bad-note', { max: MAX_NOTE })
    if (/^bot: /.test(detail)) return t('bad-bot', { bot: about.bot ?? '' })
    return null
  }
  return null
}

/**
 * A 403: the plugin's token has too low a role for this request (the service names the role it
 * needs; the changes need admin).
 * @param {Session} session @param {HttpError} e
 */
function forbidden(session, e) {
  return session.text('auto-assign.refusal.forbidden', { role: neededRole(e) ?? 'admin' })
}

/**
 * A reply for a failed request to the service, in the user's locale (never thrown).
 * @param {Session} session @param {string} endpoint @param {unknown} e
 */
function failure(session, endpoint, e) {
  if (e instanceof NetworkError) {
    return session.text('auto-assign.unreachable', { endpoint, reason: e.message })
  }
  if (e instanceof HttpError) {
    if (e.status === 401) return session.text('auto-assign.unauthorized', { status: e.status })
    if (isForbidden(e)) return forbidden(session, e)
    if (e.status >= 500 && e.status !== 501) {
      return session.text('auto-assign.unreachable', { endpoint, reason: `HTTP ${e.status}${e.detail ? ` (${e.detail})` : ''}` })
    }
    if (isFollower(e)) return session.text('auto-assign.refusal.follower', { detail: e.detail || '-' })
    return session.text('auto-assign.refused', { status: e.status, detail: e.detail || '-' })
  }
  return session.text('auto-assign.failed', { reason: e instanceof Error ? e.message : String(e) })
}

/**
 * `, until 2026-12-24T10:00:00Z` and ` (note: …)` for a reply, in the user's words ('' each
 * when there is none).
 * @param {Session} session @param {{ until?: string | null, note?: string | null }} change
 */
function untilAndNote(session, change) {
  return (change.until ? session.text('auto-assign.until', { until: change.until }) : '') +
    (change.note ? session.text('auto-assign.note', { note: change.note }) : '')
}

module.exports = {
  MAX_NOTE, serviceClient, lastRun, planned, leaderOf, isFollower, pinPath, drainPath, parseBot, author, authorNote, refusal, forbidden, failure, untilAndNote,
}
