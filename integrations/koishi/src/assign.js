// @ts-check
'use strict'
// Koishi's own `assign` (@koishijs/plugin-admin 1.4: `assign`, `assign @bot`, `assign -r`,
// `-c platform:channel`) made to last: it becomes an operator's pin (or, with -r, a hold) in the
// service, so the chosen bot still answers after any rebalance and restart of the service, and
// the service's plan answers (never silence) while that bot cannot.
//
// How it is hooked. plugin-admin's `assign` is a command whose action sets
// `session.channel.assignee` (of the target channel, `-c`), written by plugin-admin's channel
// wrapper (`$update`) or at the end of the message. The plugin listens to Koishi's
// `command/before-execute` event, which fires after Koishi's own checks (authority, unknown
// options) and before any action, and for plugin-admin's `assign` (name `assign`, with
// plugin-admin's `admin.channel` config) it
//
// 1. works out what the assign is about to write, as plugin-admin does: the target channel (`-c`
//    or this group), the bot (`-r`: none; `@bot`: that bot; nothing: the bot the message was
//    sent to);
// 2. asks the service for the pin first (PUT /v1/pins/{platform}/{channel}, with a note naming
//    the user and `Koishi assign`):
//    * taken: the service's assignee of the channel now (the pinned bot, or the plan's while it
//      cannot answer) becomes the row's target at once (`applier.expect`), the assign goes on,
//      and once the message is handled (Koishi's `middleware` event, or a second later) the row
//      is read again and set back to that assignee if the assign wrote another (the pinned bot is
//      offline or drained: the plan answers, never silence); the admin gets one more line (before
//      plugin-admin's own reply) saying so and how to release it;
//    * refused (the bot is not in the group, an unknown group or bot; the plugin's token is not of
//      the admin role, 403): the assign does not run and the admin gets the refusal in words, so
//      no row names a bot the service would not;
//    * the service unreachable: the assign runs (Koishi's manual fix works while the service is
//      down), its row is held (`applier.hold`: neither the write passes nor the message check
//      touch it), and the pin is sent as soon as the service answers; then the row follows the
//      service again.
//    A platform the service does not manage at all (404 unknown platform) is left to Koishi.
//
// Any other write of `channel.assignee` (an edit of the table, another plugin, Koishi's
// autoAssign) is noticed on the group's next message, before Koishi checks the assignee
// (`attach-channel`): that message is handled as the service assigns, and the applier writes
// the row back (`applier.disagreement`).

const { HttpError, Sleeper, backoff, describe, isForbidden, isOutage } = require('./client')
const { serviceClient, lastRun, planned, pinPath, author, refusal, failure } = require('./operator')

/** @typedef {import('koishi').Context} Context */
/** @typedef {import('koishi').Session} Session */
/** @typedef {import('./applier').Applier} Applier */
/** @typedef {import('./client').Link} Link */
/** @typedef {import('./client').ClientOptions} ClientOptions */

/** After an assign: read its row again this long after the command if no `middleware` event came. */
const RECHECK_MS = 1000
/** A queued pin the service refuses as unknown (group, bot) or as not a member is tried again
 * this long: a service that has just come back does not know the fleet until this Koishi has
 * reported it again. */
const REFUSAL_GRACE_MS = 15_000
/** A delivered pin's row is held until the service has planned it, at most this long. */
const PLAN_WAIT_MS = 60_000

/**
 * What an assign is about to do: the channel, the bot (null: `-r`, no assignee), the note.
 * @typedef {{ platform: string, channel: string, bot: string | null, note: string }} Intent
 */

/**
 * A pin waiting for the service: the assign, when the service first refused it, when the
 * service took it (then the queue waits for the plan that applies it) and the last rebalance
 * before, the requests' client.
 * @typedef {Intent & { refusedSince?: number, delivered?: number, before?: number,
 *   call?: (method: string, path: string, body?: unknown) => Promise<any> }} Queued
 */

/**
 * `platform:id` as plugin-admin splits it (its `parsePlatform`); null without a platform.
 * @param {string} text @returns {[string, string] | null}
 */
function splitPlatform(text) {
  const i = text.indexOf(':')
  if (i <= 0) return null
  return [text.slice(0, i), text.slice(i + 1)]
}

/** The service does not manage the platform (404 `unknown_platform`). @param {unknown} e */
function unknownPlatform(e) {
  if (!(e instanceof HttpError) || e.status !== 404) return false
  return e.code ? e.code === 'unknown_platform' : /^unknown platform /.test(e.detail ?? '')
}

/**
 * Whether a command is plugin-admin's `assign` (not some other plugin's command of that name).
 * @param {any} command
 */
function isAdminAssign(command) {
  return command?.name === 'assign' && !!command?.config?.admin?.channel
}

/**
 * What plugin-admin's `assign` will write, from its argv, or null where it writes nothing
 * (it answers "not in a group" or "another platform" itself).
 * @param {Session} session @param {Record<string, any>} options @param {unknown[]} args
 * @returns {Intent | null}
 */
function intentOf(session, options, args) {
  /** @type {[string, string] | null} */
  let target
  if (options.channel) target = splitPlatform(String(options.channel))
  else if (session.isDirect || !session.channelId) target = null
  else target = [session.platform, session.channelId]
  if (!target) return null
  /** @type {string | null} */
  let bot
  if (options.remove) bot = null
  else if (args[0] !== undefined && args[0] !== null && args[0] !== '') {
    const named = splitPlatform(String(args[0]))
    if (!named || named[0] !== session.platform) return null
    bot = named[1]
  } else bot = session.selfId
  const [platform, channel] = target
  return { platform, channel, bot, note: `Koishi assign by ${author(session)}` }
}

/** Pins of assigns made while the service could not be reached, sent as soon as it answers. */
class PinQueue {
  /**
   * @param {Context} ctx @param {ClientOptions & { retryMin: number, retryMax: number }} options
   * @param {Link} link @param {Applier} applier
   */
  constructor(ctx, options, link, applier) {
    this.options = options
    this.link = link
    this.applier = applier
    /** @type {import('koishi').Logger} */
    this.logger = ctx.logger('auto-assign')
    /** @type {Map<string, Queued>} */
    this.items = new Map()
    this.sleeper = new Sleeper()
    link.sleepers.add(this.sleeper)
    this.disposed = false
    /** @type {Promise<void> | undefined} */
    this.loop = undefined
  }

  /** @param {Intent} intent */
  add(intent) {
    this.items.set(intent.platform + ':' + intent.channel, { ...intent })
    this.applier.hold(intent.platform, intent.channel)
    if (!this.loop && !this.disposed) this.loop = this.run()
  }

  async run() {
    let attempt = 0
    try {
      while (this.items.size && !this.disposed) {
        await this.sleeper.sleep(backoff(attempt++, this.options.retryMin, this.options.retryMax))
        for (const [k, intent] of [...this.items]) {
          if (this.disposed) return
          // one client per pin: after a follower's 409 its reads go to the leader too
          const call = intent.call ??= serviceClient(this.options)
          if (!intent.delivered) {
            try {
              intent.before = await lastRun(call)
              await call('PUT', pinPath(intent.platform, intent.channel), { bot: intent.bot, note: intent.note })
              intent.delivered = Date.now()
              attempt = 0
            } catch (e) {
              // (a token of too low a role is no outage here: it stays refused until the
              // service's config changes)
              if (isOutage(e) && !isForbidden(e)) break
              // Unknown to a service that has just come back, until the fleet is reported again:
              // tried again (a full report wakes this loop), for a while.
              const status = /** @type {any} */ (e)?.status
              if ((status === 404 || status === 409) && !unknownPlatform(e)) {
                intent.refusedSince ??= Date.now()
                if (Date.now() - intent.refusedSince < REFUSAL_GRACE_MS) continue
              }
              // refused (the bot left the group meanwhile, …): the row follows the service
              if (this.items.get(k) === intent) this.items.delete(k)
              this.applier.release(intent.platform, intent.channel)
              this.logger.warn('the pin of an assign made while the service was unreachable (%s to %s) was refused: %s; the group follows the service again',
                k, intent.bot ?? '(none)', describe(e))
              continue
            }
          }
          // A service that has just started plans the pin with its first plan: the row stays as
          // the assign left it until then, rather than following the plan for a moment.
          let ran = false
          try {
            ran = await planned(call, intent.before ?? 0, 0)
          } catch (e) {
            if (isOutage(e)) break
          }
          if (!ran && Date.now() - intent.delivered < PLAN_WAIT_MS) continue
          if (this.items.get(k) === intent) this.items.delete(k)
          const assignee = await assigneeNow(call, intent.platform, intent.channel)
          if (assignee !== undefined) this.applier.expect(intent.platform, intent.channel, assignee)
          this.applier.release(intent.platform, intent.channel)
          this.logger.info('the pin of an assign made while the service was unreachable (%s to %s) is in the service now',
            k, intent.bot ?? '(none)')
          attempt = 0
        }
      }
    } finally {
      this.loop = undefined
    }
  }

  dispose() {
    this.disposed = true
    this.link.sleepers.delete(this.sleeper)
    this.sleeper.stop()
    if (this.items.size) {
      this.logger.warn('stopping with %d assign(s) not delivered to the service as pins: %s',
        this.items.size, [...this.items.keys()].join(', '))
    }
  }
}

/**
 * The service's assignee of a channel now (null: none), or undefined when it cannot be read.
 * @param {(method: string, path: string) => Promise<any>} call @param {string} platform @param {string} channel
 * @returns {Promise<string | null | undefined>}
 */
async function assigneeNow(call, platform, channel) {
  try {
    const a = await call('GET', `/v1/assignments/${encodeURIComponent(platform)}/${encodeURIComponent(channel)}`)
    return typeof a?.assignee === 'string' && a.assignee ? a.assignee : null
  } catch {
    return undefined
  }
}

/**
 * Hooks plugin-admin's `assign` and every message's channel row.
 * @param {Context} ctx
 * @param {ClientOptions & { retryMin: number, retryMax: number }} options
 * @param {{ applier: Applier, link: Link, reporter: import('./reporter').Reporter }} parts
 */
function registerAssign(ctx, options, { applier, link, reporter }) {
  const logger = ctx.logger('auto-assign')
  const queue = new PinQueue(ctx, options, link, applier)
  // the fleet reported again (a service back from an outage knows the groups now): try at once
  const wake = () => queue.sleeper.wake()
  reporter.reported.add(wake)
  /** Sessions that ran an assign the service took: their row is read again once the message
   * is handled. @type {WeakMap<Session, Intent>} */
  const pending = new WeakMap()

  /**
   * The line that tells the admin what the assign became in the service, sent before
   * plugin-admin's own reply (it is known before the assign runs).
   * @param {Session} session @param {Intent} intent @param {string | null | undefined} assignee
   * @param {boolean} queued
   */
  const note = (session, intent, assignee, queued) => {
    const { channel, bot } = intent
    if (queued) return session.text('auto-assign.assign.queued', { channel })
    if (bot === null) return session.text('auto-assign.assign.held', { channel })
    if (assignee === undefined || assignee === bot) return session.text('auto-assign.assign.pinned', { channel, bot })
    if (assignee) return session.text('auto-assign.assign.waiting', { channel, bot, assignee })
    return session.text('auto-assign.assign.waiting-none', { channel, bot })
  }

  /** @param {Session} session @param {string} text */
  const tell = async (session, text) => {
    try {
      await session.send(text)
    } catch (e) {
      logger.debug('assign note not sent: %s', describe(e))
    }
  }

  ctx.on('command/before-execute', async (argv) => {
    const session = argv.session
    if (!session || !isAdminAssign(argv.command)) return
    const intent = intentOf(session, argv.options ?? {}, argv.args ?? [])
    if (!intent) return
    const { platform, channel, bot } = intent
    const call = serviceClient(options)
    let before = 0
    try {
      before = await lastRun(call)
      await call('PUT', pinPath(platform, channel), { bot, note: intent.note })
    } catch (e) {
      // the plugin's token may not make pins: the assign would be undone at the group's next
      // message, so it does not run
      if (isForbidden(e)) {
        logger.warn('assign %s:%s to %s refused by the service: %s', platform, channel, bot ?? '(none)', describe(e))
        return session.text('auto-assign.assign.forbidden', { channel })
      }
      if (isOutage(e)) {
        logger.warn('assign %s:%s to %s: the service is unreachable (%s); Koishi applies it now, the pin follows when the service answers',
          platform, channel, bot ?? '(none)', describe(e))
        queue.add(intent)
        await tell(session, note(session, intent, undefined, true))
        return
      }
      // a platform the service does not manage: Koishi's assign alone, nothing to disagree with
      if (unknownPlatform(e)) return
      logger.info('assign %s:%s to %s refused by the service: %s', platform, channel, bot ?? '(none)', describe(e))
      return refusal(session, e, { platform, channel, bot }) ?? failure(session, options.endpoint, e)
    }
    // the group's assignee once the service has planned the pin (a moment; with its first plan
    // after a start): the pinned bot, or the plan's while that bot cannot answer
    const ran = await planned(call, before, options.requestTimeout).catch(() => false)
    const assignee = ran ? await assigneeNow(call, platform, channel) : undefined
    if (assignee !== undefined) applier.expect(platform, channel, assignee)
    logger.info('assign %s:%s to %s by %s: pinned in the service (the group\'s assignee now: %s)',
      platform, channel, bot ?? '(none)', author(session), assignee === undefined ? '?' : assignee ?? '(none)')
    pending.set(session, intent)
    // a command executed outside a message emits no `middleware` event: read the row again
    // later anyway (twice does no harm)
    ctx.setTimeout(() => applier.recheck(platform, channel), RECHECK_MS)
    await tell(session, note(session, intent, assignee, false))
  })

  // The message is handled: its writes (the assign's) are done. Read the row again: it follows
  // the service (the pinned bot, or the plan's while that bot cannot answer).
  ctx.on('middleware', (session) => {
    const intent = pending.get(session)
    if (!intent) return
    pending.delete(session)
    applier.recheck(intent.platform, intent.channel)
  })

  // Every group message: a row the plugin did not write is answered as the service assigns
  // (for this message), and written back.
  ctx.on('attach-channel', (session) => {
    const channel = /** @type {any} */ (session.channel)
    const id = session.channelId
    if (!channel || !id || !session.platform || (session.guildId && session.guildId !== id)) return
    const want = applier.disagreement(session.platform, id, typeof channel.assignee === 'string' ? channel.assignee : '')
    if (want === undefined) return
    channel.assignee = want
    // for this message only: the row is the applier's to write (Koishi's write at the end of a
    // long message could land after a newer one of the applier's)
    if (channel.$diff) delete channel.$diff.assignee
  })

  ctx.on('dispose', () => {
    reporter.reported.delete(wake)
    queue.dispose()
  })
  return { queue }
}

module.exports = { registerAssign, intentOf, isAdminAssign, PinQueue }
