// @ts-check
'use strict'
// The applier: follows GET /v1/assignments/stream and writes every group's assignee into
// Koishi's `channel` table through ctx.database.upsert, so Koishi obeys on the next message
// whatever database it runs on. A row that someone else wrote (an edit of the table, Koishi's
// autoAssign) is noticed on the group's next message and written back (`disagreement`); an
// admin's `assign` becomes a pin in the service first (src/assign.js), and while that pin
// waits for the service the row is left as the admin wrote it (`hold`).

const { HttpError, NetworkError, Once, Sleeper, backoff, describe, headers, isOutage, networkReason, url, SseParser } = require('./client')

/** @typedef {import('koishi').Context} Context */
/** @typedef {import('./client').Link} Link */
/** @typedef {import('./client').ClientOptions} ClientOptions */

/** No byte for this long (the service sends a keep-alive every 15 s): the connection is dead. */
const STREAM_IDLE_MS = 45_000
/** UNIQUE-violation retries (a concurrent autoAssign INSERT) before the normal backoff. */
const UNIQUE_RETRIES = 5

/** The stream skipped a version: resync from a new snapshot. */
class GapError extends Error {}

class Applier {
  /**
   * @param {Context} ctx
   * @param {ClientOptions & { reporter?: string, batchSize: number, retryMin: number, retryMax: number }} config
   *   reporter: named in the stream's URL (the service then counts the open stream as its sign of life)
   * @param {Link} link
   * @param {{ onReconnect?: () => void }} [hooks] onReconnect: the stream came back after a loss
   */
  constructor(ctx, config, link, hooks = {}) {
    this.ctx = ctx
    this.config = config
    this.link = link
    this.hooks = hooks
    /** @type {import('koishi').Logger} */
    this.logger = ctx.logger('auto-assign')
    /** The service's assignment as last heard: platform → channel → bot ('' = unassigned).
     * @type {Map<string, Map<string, string>>} */
    this.desired = new Map()
    /** What Koishi's table holds, as far as this plugin knows: platform → channel → assignee
     * (null = no row). Dropped on every snapshot, so a resync re-reads the rows.
     * @type {Map<string, Map<string, string | null>>} */
    this.known = new Map()
    /** Platforms that had a bot at the last write pass. @type {Set<string>} */
    this.active = new Set()
    /** Rows left alone: an admin's `assign` whose pin the service has not taken yet
     * (platform:channel). @type {Set<string>} */
    this.held = new Set()
    /** The last foreign row logged per channel, so N bots' copies of a message log it once.
     * @type {Map<string, string>} */
    this.reported = new Map()
    /** @type {number | null} */
    this.version = null
    /** bumped by every snapshot: a write pass of an older generation stops early */
    this.generation = 0
    this.dirty = false
    this.writing = false
    this.disposed = false
    this.streamSleeper = new Sleeper()
    this.writeSleeper = new Sleeper()
    link.sleepers.add(this.streamSleeper)
    /** @type {AbortController | undefined} */
    this.current = undefined
    this.dbDown = false
    /** @type {Promise<void> | undefined} */
    this.loop = undefined
    /** @type {Promise<void> | undefined} */
    this.writer = undefined
    this.refused = new Once(message => this.logger.warn('assignment stream: %s', message))
  }

  start() {
    this.loop = this.follow()
  }

  /**
   * The service's assignee of a channel as last heard on the stream: a bot id, '' (unassigned),
   * or undefined (the service has not named the channel).
   * @param {string} platform @param {string} channel @returns {string | undefined}
   */
  assigneeOf(platform, channel) {
    return this.desired.get(platform)?.get(channel)
  }

  // ---- operator changes, and rows written by others -------------------------------------

  /**
   * The service's assignee of a channel right after an operator change (a pin, a hold), before
   * the stream brings it: the row then follows it at once. A later stream event wins.
   * @param {string} platform @param {string} channel @param {string | null} assignee
   */
  expect(platform, channel, assignee) {
    let m = this.desired.get(platform)
    if (!m) this.desired.set(platform, m = new Map())
    m.set(channel, assignee ?? '')
    this.kick()
  }

  /** Read the row again and write it if it differs (someone may have written it).
   * @param {string} platform @param {string} channel */
  recheck(platform, channel) {
    this.known.get(platform)?.delete(channel)
    this.kick()
  }

  /** Leave this row as it is until `release` (an assign whose pin is not delivered yet).
   * @param {string} platform @param {string} channel */
  hold(platform, channel) {
    this.held.add(key(platform, channel))
  }

  /** @param {string} platform @param {string} channel */
  release(platform, channel) {
    this.held.delete(key(platform, channel))
    this.recheck(platform, channel)
  }

  /**
   * A group message's row as Koishi just read it: undefined when it agrees with the service
   * (or the service has not named the channel, or the row is held), else the service's assignee,
   * which the caller puts in its place for this message. A row the plugin did not write is
   * also read again and written back.
   * @param {string} platform @param {string} channel @param {string} row
   * @returns {string | undefined}
   */
  disagreement(platform, channel, row) {
    const want = this.desired.get(platform)?.get(channel)
    if (want === undefined || row === want) return undefined
    const k = key(platform, channel)
    if (this.held.has(k)) return undefined
    const known = this.known.get(platform)
    // the plugin's own write of an older assignment: the pass under way replaces it
    if (known?.get(channel) === row) return want
    if (row && this.reported.get(k) !== row) {
      this.reported.set(k, row)
      this.logger.info('channel %s: assignee %s was not written by auto-assign (an edit of the channel table?); set back to the service\'s %s',
        k, row, want || '(none)')
    }
    known?.delete(channel)
    // (while the database fails, the write loop retries by itself: no retry per message)
    if (!this.dbDown) this.kick()
    return want
  }

  // ---- the stream ---------------------------------------------------------------------

  /**
   * Follows the stream until disposed. The stream names this Koishi's reporter
   * (`?reporter=`): while it is open the service counts the reporter alive, and when it closes
   * (a crash closes it at once) and does not come back within the service's
   * `sources.http.streamGrace` (0.5 s), the reporter's bots go offline. So a stream that drops
   * after it was in sync is opened again at once, without a word in the log unless that fails
   * too; only then the backoff (and the outage warning) takes over. At most one immediate
   * retry per `retryMin`: a stream that keeps dropping falls back to the backoff.
   */
  async follow() {
    let attempt = 0
    let lost = false
    let lastGap = 0
    let lastQuick = -Infinity
    while (!this.disposed) {
      const controller = new AbortController()
      this.current = controller
      let synced = false
      /** a stream in sync that ended or dropped: open it again at once */
      let quick = false
      try {
        const res = await this.connect(controller)
        this.link.ok()
        this.refused.clear()
        if (lost) this.hooks.onReconnect?.()
        lost = true
        await this.consume(res, controller, () => { synced = true })
        // the server ended the stream: it stops, or this client lagged
        this.logger.debug('assignment stream ended by the service; reconnecting')
        quick = synced
      } catch (e) {
        if (this.disposed) break
        if (e instanceof GapError) {
          this.logger.debug('%s: resyncing', e.message)
          lost = false // the service is fine: no need to re-report
          // at once, unless gaps keep coming (then with the backoff below)
          const now = Date.now()
          const again = now - lastGap < this.config.retryMax
          lastGap = now
          if (!again) continue
        } else if (synced && isOutage(e)) {
          // a drop: the reconnect below says whether the service is gone
          this.logger.debug('assignment stream lost (%s); reconnecting', describe(e))
          quick = true
        } else if (isOutage(e)) this.link.fail(e)
        else this.refused.say(describe(e))
      } finally {
        controller.abort()
      }
      if (synced) attempt = 0
      if (quick) {
        const now = Date.now()
        if (now - lastQuick >= this.config.retryMin) {
          lastQuick = now
          continue
        }
      }
      await this.streamSleeper.sleep(backoff(attempt++, this.config.retryMin, this.config.retryMax))
    }
  }

  /** The stream's path: it names this Koishi's reporter, whose sign of life it is. */
  streamPath() {
    const reporter = this.config.reporter
    return '/v1/assignments/stream' + (reporter ? '?reporter=' + encodeURIComponent(reporter) : '')
  }

  /** @param {AbortController} controller */
  async connect(controller) {
    const timer = setTimeout(() => controller.abort(), this.config.requestTimeout)
    /** @type {Response} */
    let res
    try {
      res = await (this.config.fetch ?? fetch)(url(this.config.endpoint, this.streamPath()), {
        headers: { ...headers(this.config, false), accept: 'text/event-stream' },
        signal: controller.signal,
      })
    } catch (e) {
      throw new NetworkError(controller.signal.aborted && !this.disposed ? 'timed out' : networkReason(e))
    } finally {
      clearTimeout(timer)
    }
    if (!res.ok || !res.body) {
      const text = await res.text().catch(() => '')
      let detail = text.slice(0, 200)
      /** @type {any} */
      let body = null
      try {
        body = JSON.parse(text)
        if (typeof body?.error === 'string') detail = body.error
      } catch {}
      throw new HttpError('GET', '/v1/assignments/stream', res.status, detail, body)
    }
    return res
  }

  /** @param {Response} res @param {AbortController} controller @param {() => void} onSynced */
  async consume(res, controller, onSynced) {
    /** @type {unknown} */
    let failure
    const parser = new SseParser((event, data) => {
      if (failure) return
      try {
        if (this.handle(event, data)) onSynced()
      } catch (e) {
        failure = e
      }
    })
    const decoder = new TextDecoder()
    /** @type {NodeJS.Timeout | undefined} */
    let idle
    let idleFired = false
    const arm = () => {
      clearTimeout(idle)
      idle = setTimeout(() => { idleFired = true; controller.abort() }, STREAM_IDLE_MS)
    }
    arm()
    const reader = /** @type {ReadableStream<Uint8Array>} */ (res.body).getReader()
    try {
      for (;;) {
        const { value, done } = await reader.read()
        if (done) break
        arm()
        parser.push(decoder.decode(value, { stream: true }))
        if (failure) throw failure
      }
    } catch (e) {
      if (failure) throw failure
      if (idleFired) throw new NetworkError(`no data on the assignment stream for ${STREAM_IDLE_MS / 1000} s`)
      throw new NetworkError(networkReason(e))
    } finally {
      clearTimeout(idle)
      reader.cancel().catch(() => {})
    }
  }

  /**
   * One stream event. Returns true once in sync (a snapshot). Throws GapError on a skipped version.
   * @param {string} event @param {string} data
   */
  handle(event, data) {
    if (event === 'snapshot') {
      const body = JSON.parse(data)
      this.snapshot(body.version, body.assignments ?? {})
      return true
    }
    if (event === 'changes') {
      const body = JSON.parse(data)
      if (this.version === null || body.version !== this.version + 1) {
        throw new GapError(`assignment stream: version ${body.version} after ${this.version}`)
      }
      this.version = body.version
      this.change(body.platform, body.assignments ?? {})
      return false
    }
    return false
  }

  /**
   * The whole assignment at `version`. Channels this plugin had assigned and the snapshot no
   * longer lists are unassigned; every row is compared with the table again.
   * @param {number} version @param {Record<string, Record<string, string | null>>} assignments
   */
  snapshot(version, assignments) {
    this.version = version
    /** @type {Map<string, Map<string, string>>} */
    const next = new Map()
    for (const [platform, channels] of Object.entries(assignments)) {
      const m = new Map()
      for (const [channel, bot] of Object.entries(channels ?? {})) m.set(channel, typeof bot === 'string' ? bot : '')
      next.set(platform, m)
    }
    for (const [platform, channels] of this.desired) {
      for (const [channel, bot] of channels) {
        if (!bot) continue
        let m = next.get(platform)
        if (!m) next.set(platform, m = new Map())
        if (!m.has(channel)) m.set(channel, '')
      }
    }
    this.desired = next
    this.known = new Map()
    this.generation++
    this.kick()
  }

  /** @param {string} platform @param {Record<string, string | null>} assignments */
  change(platform, assignments) {
    let m = this.desired.get(platform)
    if (!m) this.desired.set(platform, m = new Map())
    for (const [channel, bot] of Object.entries(assignments)) m.set(channel, typeof bot === 'string' ? bot : '')
    this.kick()
  }

  // ---- writing ------------------------------------------------------------------------

  /** Something to write (or a platform got its first bot): run a write pass soon. */
  kick() {
    this.dirty = true
    this.writeSleeper.wake()
    if (!this.writing && !this.disposed) this.writer = this.drain()
  }

  async drain() {
    this.writing = true
    let attempt = 0
    let unique = 0
    try {
      while (this.dirty && !this.disposed) {
        this.dirty = false
        try {
          await this.pass()
          attempt = 0
          unique = 0
          if (this.dbDown) {
            this.dbDown = false
            this.logger.info('assignments written to the database again')
          }
        } catch (e) {
          if (this.disposed) break
          this.dirty = true
          if (isUnique(e) && unique++ < UNIQUE_RETRIES) {
            // Koishi's autoAssign inserted the row between our read and our insert: re-read, retry.
            this.logger.debug('a row was inserted meanwhile (autoAssign?): %s; retrying', describe(e))
            continue
          }
          if (!this.dbDown) {
            this.dbDown = true
            this.logger.warn('cannot write assignments to the database: %s; retrying', describe(e))
          }
          await this.writeSleeper.sleep(backoff(attempt++, this.config.retryMin, this.config.retryMax))
        }
      }
    } finally {
      this.writing = false
    }
  }

  /** Platforms this Koishi has a bot on. */
  platforms() {
    /** @type {Set<string>} */
    const set = new Set()
    for (const bot of this.ctx.bots) if (bot.platform) set.add(bot.platform)
    return set
  }

  /** Make the table match `desired` for every platform this Koishi has a bot on. */
  async pass() {
    const generation = this.generation
    const active = this.platforms()
    for (const platform of active) {
      // A platform back after a while: whatever we knew about its rows may be stale.
      if (!this.active.has(platform)) this.known.delete(platform)
    }
    this.active = active
    const size = Math.max(1, this.config.batchSize)
    for (const [platform, channels] of this.desired) {
      if (!active.has(platform)) continue
      let known = this.known.get(platform)
      if (!known) this.known.set(platform, known = new Map())
      // Rows not known yet: read their assignee (one query per batch).
      const unknown = [...channels.keys()].filter(c => !known.has(c))
      for (let i = 0; i < unknown.length; i += size) {
        if (this.stale(generation)) return
        const ids = unknown.slice(i, i + size)
        const rows = await this.ctx.database.get('channel', { platform, id: ids }, ['id', 'assignee'])
        const found = new Map(rows.map(r => [r.id, r.assignee ?? '']))
        for (const id of ids) known.set(id, found.has(id) ? /** @type {string} */ (found.get(id)) : null)
      }
      // Rows that differ. An unassigned channel without a row needs none; a held one is left.
      const todo = [...channels].filter(([c, bot]) => {
        if (this.held.size && this.held.has(key(platform, c))) return false
        const has = known.get(c)
        return has === null ? bot !== '' : has !== bot
      })
      for (let i = 0; i < todo.length; i += size) {
        if (this.stale(generation)) return
        const batch = todo.slice(i, i + size)
        try {
          await this.ctx.database.upsert('channel', batch.map(([id, assignee]) => ({ platform, id, assignee })))
        } catch (e) {
          for (const [id] of batch) known.delete(id)
          throw e
        }
        for (const [id, assignee] of batch) {
          known.set(id, assignee)
          this.reported.delete(key(platform, id))
        }
        this.logger.debug('wrote %d assignee(s) on %s (version %s)', batch.length, platform, this.version)
      }
    }
  }

  /** A newer snapshot arrived: this pass is moot, the next one starts over. @param {number} generation */
  stale(generation) {
    if (generation === this.generation && !this.disposed) return false
    this.dirty = !this.disposed
    return true
  }

  dispose() {
    this.disposed = true
    this.link.sleepers.delete(this.streamSleeper)
    this.streamSleeper.stop()
    this.writeSleeper.stop()
    this.current?.abort()
  }
}

/** @param {string} platform @param {string} channel */
function key(platform, channel) {
  return platform + ':' + channel
}

/** A UNIQUE / duplicate-key violation, on SQLite, MySQL or PostgreSQL. @param {unknown} e */
function isUnique(e) {
  return /UNIQUE constraint|Duplicate entry|duplicate key|unique constraint|ER_DUP_ENTRY|SQLITE_CONSTRAINT_PRIMARYKEY/i.test(String(e) + ' ' + String(/** @type {any} */ (e)?.code ?? ''))
}

module.exports = { Applier, GapError, isUnique }
