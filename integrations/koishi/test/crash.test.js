// @ts-check
'use strict'
// Crash-fast liveness (issue 62): the plugin follows the assignment stream naming its reporter
// (`?reporter=`), so the service counts the open stream as the Koishi's sign of life. Measured
// with real processes and the real service binary:
//
// 1. Two Koishi PROCESSES (test/support/koishi-process.js), one bot each, both bots in the same
//    four groups, one service configured as the docs say (`sources.http: {startupWait: 0,
//    offlineGrace: 30, streamGrace: 0.5}`, the default trigger delays). Every 100 ms a message
//    goes to every group, through both bots (each process's mock bot gets it over the
//    process's stdin, and the process says on its stdout whether its bot answered, and when).
//    One process is SIGKILLed: its groups must be answered by the other bot within about a
//    second (the streamGrace, not `offlineGrace`'s 30 s), and no message answered twice.
//    (Every 100 ms, not 50: a Koishi process handles some 150 mock messages a second on a
//    whole core; at 80 a second each, two of them on a busy two-core machine fall seconds
//    behind, and the figure would measure that backlog, not the failover.)
// 2. A stream that drops (a TCP proxy between the plugin and the service cuts every connection)
//    is opened again at once: no bot goes offline. A stream that stays away longer than
//    streamGrace takes the bots offline; once back, the plugin reports them again.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const { mkdirSync, mkdtempSync, rmSync } = require('node:fs')
const { createServer, connect } = require('node:net')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const { createInterface } = require('node:readline')
const plugin = require('../src')
const { createKoishi, captureLogs, waitFor, sleep } = require('./support/koishi')
const { Service, freePort, TOKEN } = require('./support/service')

const TICK = 100
/** Milliseconds between two reports of a process's message counts. */
const REPORT_INTERVAL = 200
/** A scenario has settled once every group's last SETTLE messages were each answered by one bot. */
const SETTLE = 5
const G = (/** @type {number} */ i) => String(700000 + i)
const GROUPS = [1, 2, 3, 4].map(G)
const CHILD = join(__dirname, 'support', 'koishi-process.js')

/** @type {string} */ let dir

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-crash-'))
})

after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true })
})

// ---- 1. two Koishi processes, one killed -------------------------------------------------

/** One Koishi process (test/support/koishi-process.js), driven over its stdin. */
class KoishiProcess {
  /**
   * @param {string} name  its reporter name, and its directory's
   * @param {{ selfId: string, guilds: string[] }[]} bots @param {Record<string, unknown>} pluginConfig
   * @param {(event: any) => void} onEvent
   */
  constructor(name, bots, pluginConfig, onEvent) {
    this.name = name
    this.bots = bots.map(b => b.selfId)
    const home = join(dir, name)
    mkdirSync(home)
    this.child = spawn(process.execPath, [CHILD, JSON.stringify({ dir: home, bots, pluginConfig: { ...pluginConfig, reporter: name } })], {
      cwd: home, stdio: ['pipe', 'pipe', 'pipe'],
    })
    this.alive = true
    /** its log (stderr), for the failure messages @type {string[]} */
    this.log = []
    this.exited = new Promise(resolve => this.child.once('exit', (code, signal) => { this.alive = false; resolve(signal ?? code) }))
    // a write to a process that was just killed fails with EPIPE: that message is lost, as a
    // message sent to a crashed bot is
    this.child.stdin?.on('error', () => {})
    createInterface({ input: /** @type {import('node:stream').Readable} */ (this.child.stderr) }).on('line', l => this.log.push(l))
    /** @type {Promise<void>} */
    this.ready = new Promise((resolve, reject) => {
      createInterface({ input: /** @type {import('node:stream').Readable} */ (this.child.stdout) }).on('line', (line) => {
        const event = JSON.parse(line)
        if (event.ev === 'ready') resolve()
        else onEvent({ ...event, process: name })
      })
      this.exited.then(how => reject(new Error(`Koishi process ${name} exited (${how}) before it was ready:\n${this.log.slice(-20).join('\n')}`)))
    })
  }

  /** @param {unknown} command */
  send(command) {
    if (this.alive) this.child.stdin?.write(JSON.stringify(command) + '\n')
  }

  kill() {
    this.alive = false
    this.child.kill('SIGKILL')
  }

  /** A clean stop: stdin closed, the process stops Koishi (the plugin's DELETE) and exits. */
  async stop() {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return
    this.child.stdin?.end()
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 8000)
    await this.exited
    clearTimeout(timer)
  }
}

/**
 * @typedef {{ group: string, seq: number, t: number, wall: number, receivers: string[], answered: string[], at: number[],
 *   replies: number, lag: number }} Message
 * t: when it was sent (performance.now()), wall: the same as Date.now(); at: when each answer
 * was sent (the process's Date.now()); lag: ms from sending to the last process's handling
 */

/** The messages: every TICK one to every group, through every bot of every live process. */
class Traffic {
  /** @param {KoishiProcess[]} processes */
  constructor(processes) {
    this.processes = processes
    /** @type {Message[]} */
    this.messages = []
    /** @type {Map<number, Message>} */
    this.bySeq = new Map()
    this.seq = 0
    this.running = false
    /** @type {NodeJS.Timeout | undefined} */
    this.timer = undefined
  }

  /** An event of a process. @param {any} event */
  onEvent(event) {
    const m = this.bySeq.get(event.seq)
    if (!m) return
    m.replies++
    m.lag = Math.max(m.lag, event.at - m.wall)
    if (event.answered) {
      m.answered.push(event.bot)
      m.at.push(event.at)
    }
  }

  start() {
    this.running = true
    const start = performance.now()
    let n = 0
    const step = () => {
      if (!this.running) return
      this.tick()
      n++
      this.timer = setTimeout(step, Math.max(0, start + n * TICK - performance.now()))
    }
    step()
  }

  tick() {
    const t = performance.now()
    const wall = Date.now()
    const live = this.processes.filter(p => p.alive)
    for (const group of GROUPS) {
      /** @type {Message} */
      const m = { group, seq: ++this.seq, t, wall, receivers: live.flatMap(p => p.bots), answered: [], at: [], replies: 0, lag: 0 }
      this.messages.push(m)
      this.bySeq.set(m.seq, m)
      for (const p of live) p.send({ op: 'ping', seq: m.seq, group })
    }
  }

  /** Stops sending; waits (up to 3 s) for the answers of the live processes' messages in flight. */
  async stop() {
    this.running = false
    clearTimeout(this.timer)
    const live = new Set(this.processes.filter(p => p.alive).flatMap(p => p.bots))
    await waitFor(() => this.messages.every(m => m.replies >= m.receivers.filter(b => live.has(b)).length), 3000, 'answers in flight')
      .catch(() => {})
  }

  /**
   * Every group's last SETTLE messages sent since `from` were each answered by exactly one bot,
   * the same one, and that bot is `want(group)` when given. Resolves with group → bot, or null.
   * @param {number} from @param {(group: string) => string | undefined} [want]
   */
  settled(from, want) {
    /** @type {Record<string, string>} */
    const by = {}
    for (const group of GROUPS) {
      const last = this.messages.filter(m => m.group === group && m.t >= from && m.replies >= m.receivers.length).slice(-SETTLE)
      if (last.length < SETTLE) return null
      const bot = last[0].answered[0]
      if (!last.every(m => m.answered.length === 1 && m.answered[0] === bot)) return null
      if (want && want(group) !== bot) return null
      by[group] = bot
    }
    return by
  }

  /**
   * The figures of the messages sent from `from` on: a run of unanswered messages in a group
   * lasts from its first message to one tick past its last (the next message is the first that
   * can be answered); for each group, from `from` to the first message answered after a run.
   * @param {number} from
   */
  figures(from) {
    /** @type {{ group: string, from: number, to: number }[]} */
    const runs = []
    const f = { messages: 0, unanswered: 0, double: 0, longest: 0, lag: 0, runs }
    /** @type {Map<string, { group: string, from: number, to: number }>} */
    const open = new Map()
    for (const m of this.messages) {
      if (m.t < from) continue
      f.messages++
      f.lag = Math.max(f.lag, Math.round(m.lag))
      if (m.answered.length > 1) f.double++
      if (!m.answered.length) {
        f.unanswered++
        let run = open.get(m.group)
        if (!run) {
          f.runs.push(run = { group: m.group, from: m.t, to: m.t + TICK })
          open.set(m.group, run)
        }
        run.to = m.t + TICK
        f.longest = Math.max(f.longest, Math.round(run.to - run.from))
      } else open.delete(m.group)
    }
    return f
  }

  /**
   * As a member of a group sees it: the longest time without an answer in one of `groups`,
   * between two answers (the time each was sent by its bot), the later one after `wall`
   * (Date.now()).
   * @param {number} wall @param {string[]} groups
   */
  silence(wall, groups) {
    let longest = 0
    for (const group of groups) {
      const times = this.messages.filter(m => m.group === group).flatMap(m => m.at).sort((a, b) => a - b)
      for (let i = 1; i < times.length; i++) if (times[i] > wall) longest = Math.max(longest, times[i] - times[i - 1])
    }
    return longest
  }
}

test('two Koishi processes, one SIGKILLed: its groups are answered by the other bot within a second, none twice', async () => {
  const service = new Service({
    dir, port: await freePort(), startupWait: 0, offlineGrace: 30, streamGrace: 0.5, triggerDelays: null, enabledPlatforms: null,
  })
  /** @type {KoishiProcess[]} */
  const processes = []
  /** @type {Traffic | undefined} */
  let traffic
  // message counts reported every 200 ms: the killed process's last ones die with it
  const pluginConfig = { endpoint: service.endpoint, token: TOKEN, messageReportInterval: REPORT_INTERVAL / 1000 }
  const diagnostics = () => [
    `--- replies: ${traffic?.messages.filter(m => m.replies).length} of ${traffic?.messages.length} messages, the last replied: #${traffic?.messages.filter(m => m.replies).at(-1)?.seq}`,
    `--- the last messages: ${JSON.stringify(GROUPS.map(g => traffic?.messages.filter(m => m.group === g).slice(-3)
      .map(m => `${g} #${m.seq} ${m.answered.join('+') || '-'} (${m.replies}/${m.receivers.length})`)))}`,
    ...processes.map(p => `--- ${p.name}'s log:\n${p.log.slice(-30).join('\n')}`),
    `--- the service's log:\n${service.log.slice(-30).join('\n')}`,
  ].join('\n')
  try {
    await service.start()
    const sink = (/** @type {any} */ event) => traffic?.onEvent(event)
    processes.push(new KoishiProcess('koishi-a', [{ selfId: '1001', guilds: GROUPS }], pluginConfig, sink))
    processes.push(new KoishiProcess('koishi-b', [{ selfId: '1002', guilds: GROUPS }], pluginConfig, sink))
    const [a, b] = processes
    await Promise.all(processes.map(p => p.ready))
    // both reported (the second's bot-online rebalance waits for botOffline's sibling,
    // botOnline, 5 s: a requested rebalance splits the groups now)
    await waitFor(() => service.count(/bot onebot:1001 online in 4 channel/) && service.count(/bot onebot:1002 online in 4 channel/), 10000, 'both processes reported')
      .catch((e) => { throw new Error(`${e.message}\n${diagnostics()}`) })
    assert.equal((await service.api('POST', '/v1/rebalance')).status, 202)
    const assignment = await waitFor(async () => {
      const a = await service.assignments()
      const bots = new Set(GROUPS.map(g => a[g]))
      return GROUPS.every(g => a[g]) && bots.has('1001') && bots.has('1002') ? a : null
    }, 10000, 'the groups split between both bots')

    traffic = new Traffic(processes)
    traffic.start()
    const t0 = performance.now()
    const before = await waitFor(() => traffic?.settled(t0, g => assignment[g]), 10000, 'each group answered by its assignee')
      .catch((e) => { throw new Error(`${e.message}\n${diagnostics()}`) })
    const victims = GROUPS.filter(g => before[g] === '1001')
    assert.ok(victims.length > 0 && victims.length < GROUPS.length, `both bots answer some groups: ${JSON.stringify(before)}`)
    const settledAt = performance.now()

    // the kill
    const killedAt = performance.now()
    const killedWall = Date.now()
    a.kill()
    await a.exited
    const after = await waitFor(() => traffic?.settled(killedAt, () => '1002'), 10000, 'the other bot answers every group')
      .catch((e) => { throw new Error(`${e.message}\n${diagnostics()}`) })
    assert.deepEqual(Object.keys(after).sort(), GROUPS)
    await sleep(500) // more messages after the move: none answered twice, none unanswered
    await traffic.stop()

    // as a member of a group sees it: the longest time between two answers in one of the killed
    // bot's groups, the later one after the kill; the same in the other groups, where nothing
    // happened (what a loaded machine costs by itself); and the first answer after the kill in
    // each of the killed bot's groups
    const silence = traffic.silence(killedWall, victims)
    const baseline = traffic.silence(killedWall, GROUPS.filter(g => !victims.includes(g)))
    const firstAnswer = victims.map((g) => {
      const at = /** @type {Message[]} */ (traffic?.messages).filter(m => m.group === g).flatMap(m => m.at).filter(t => t > killedWall)
      return at.length ? Math.min(...at) - killedWall : Infinity
    })
    // by the messages sent from the kill on: runs of unanswered ones
    const f = traffic.figures(killedAt)
    // messages sent before the kill that nobody answered: the killed process had them queued
    const lost = traffic.messages.filter(m => m.t >= settledAt && m.t < killedAt && !m.answered.length).length
    const whole = traffic.figures(settledAt)
    const offline = service.log.find(l => /fleet reporter koishi-a: its assignment stream closed and did not come back within 500ms/.test(l))
    const offlineAfter = offline ? Date.parse(/\] (\S+Z) /.exec(offline)?.[1] ?? '') - killedWall : NaN
    console.log(`# SIGKILL of one of two Koishi processes → its ${victims.length} group(s) answered by the other bot: ` +
      `longest time without an answer ${silence} ms (first answer after the kill: ${firstAnswer.join('/')} ms; ` +
      `in the other bot's own groups meanwhile: ${baseline} ms); ` +
      `messages sent after the kill: longest run unanswered ${f.longest} ms, ${f.unanswered} of ${f.messages} unanswered; ` +
      `${lost} queued in the killed process; ${whole.double} answered twice; ` +
      `the service took its bot offline ${offlineAfter} ms after the kill; a process's longest time to handle a message ${whole.lag} ms`)
    assert.ok(offline, `the service took koishi-a's bot offline by its stream (streamGrace), not offlineGrace:\n${diagnostics()}`)
    assert.ok(f.unanswered > 0, 'the killed bot had groups: some messages went unanswered')
    assert.ok(silence < 2000, `longest time without an answer ${silence} ms (goal ≤ 1 s)`)
    assert.ok(f.longest < 2000, `longest run of unanswered messages ${f.longest} ms (goal ≤ 1 s): ${JSON.stringify(f.runs)}`)
    assert.equal(whole.double, 0, 'no message answered twice')
    assert.deepEqual(await service.assignments(), Object.fromEntries(GROUPS.map(g => [g, '1002'])))

    // the survivor is stopped cleanly
    await b.stop()
    await waitFor(() => service.count(/fleet reporter koishi-b: stopped/) > 0, 5000, 'the survivor said goodbye')

    // each answered message is counted (balanceBy: messages) by the process that answered it,
    // once: the survivor's groups exactly; the killed bot's groups every message the survivor
    // answered, and at most every answered message (the counts the killed process had not
    // reported yet, one report interval at most, died with it). The survivor sent its last
    // counts before it said goodbye: nothing can be reported after this reading.
    const messages = traffic.messages
    /** @param {string} g @param {string} [by] */
    const answered = (g, by) => messages.filter(m => m.group === g && m.answered.length && (!by || m.answered.includes(by))).length
    const bounds = Object.fromEntries(GROUPS.map(g => [g, victims.includes(g) ? [answered(g, '1002'), answered(g)] : [answered(g), answered(g)]]))
    const { body } = await service.api('GET', '/v1/weights/onebot')
    const count = Object.fromEntries(GROUPS.map(g => [g, (body.weights[g] ?? 0) / Math.LN2]))
    console.log(`# counted (messages, of the answered ones): ${GROUPS.map(g => `${g} ${count[g].toFixed(1)} of ${bounds[g][1]}`).join(', ')}`)
    for (const g of GROUPS) {
      assert.ok(count[g] >= bounds[g][0] - 0.5 && count[g] <= bounds[g][1] + 0.5, `group ${g}: ${count[g]} counted, want ${bounds[g].join('..')}`)
    }
  } finally {
    await traffic?.stop()
    for (const p of processes) if (p.alive) p.kill()
    await Promise.all(processes.map(p => p.exited))
    await service.stop()
  }
})

// ---- 2. a dropped stream ------------------------------------------------------------------

/**
 * A TCP proxy to the service that can cut every connection, or refuse new ones (they are
 * closed as soon as they arrive). It notes every HTTP request line that goes through.
 * @param {number} target
 */
async function proxy(target) {
  /** @type {Set<import('node:net').Socket>} */
  const sockets = new Set()
  /** @type {{ t: number, line: string }[]} */
  const requests = []
  const state = { blocked: false }
  const server = createServer((client) => {
    if (state.blocked) {
      client.destroy()
      return
    }
    const upstream = connect(target, '127.0.0.1')
    for (const s of [client, upstream]) {
      sockets.add(s)
      s.on('close', () => sockets.delete(s))
      s.on('error', () => {})
    }
    client.on('data', (chunk) => {
      for (const m of chunk.toString('latin1').matchAll(/^(GET|POST|PUT|DELETE) (\S+) HTTP\/1\.1\r$/gm)) {
        requests.push({ t: performance.now(), line: `${m[1]} ${m[2]}` })
      }
    })
    client.pipe(upstream)
    upstream.pipe(client)
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
  })
  await new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(undefined)))
  const address = server.address()
  const port = typeof address === 'object' && address ? address.port : 0
  return {
    port,
    requests,
    state,
    /** Closes every connection now (both ends). */
    cut() {
      for (const s of sockets) s.destroy()
    },
    async close() {
      this.cut()
      await new Promise(resolve => server.close(() => resolve(undefined)))
    },
  }
}

test('a dropped stream is opened again at once (no bot goes offline); one that stays away past streamGrace takes the bots offline until it is back', async () => {
  const home = join(dir, 'drop')
  mkdirSync(home)
  const service = new Service({ dir: home, port: await freePort() })
  const logs = captureLogs()
  /** @type {Awaited<ReturnType<typeof proxy>> | undefined} */
  let net
  /** @type {Awaited<ReturnType<typeof createKoishi>> | undefined} */
  let koishi
  const groups = [11, 12, 13, 14].map(G)
  const streams = () => /** @type {NonNullable<typeof net>} */ (net).requests.filter(r => r.line.startsWith('GET /v1/assignments/stream'))
  const offlineLines = () => service.count(/fleet reporter koishi-drop: its assignment stream closed/)
  /** every group assigned and answered by its assignee @returns {Promise<Record<string, string> | null>} */
  const agreed = async () => {
    const a = await service.assignments()
    if (!groups.every(g => a[g])) return null
    const answers = await /** @type {NonNullable<typeof koishi>} */ (koishi).answers(groups)
    return groups.every(g => JSON.stringify(answers[g]) === JSON.stringify([a[g]])) ? a : null
  }
  try {
    await service.start()
    net = await proxy(service.port)
    koishi = await createKoishi({
      dir: home,
      bots: [{ selfId: '2001', guilds: groups }, { selfId: '2002', guilds: groups }],
      plugin,
      pluginConfig: {
        endpoint: `http://127.0.0.1:${net.port}`, token: TOKEN, reporter: 'koishi-drop',
        heartbeatInterval: 1000, retryMin: 100, retryMax: 500, requestTimeout: 2000, messageReportInterval: 0,
      },
    })
    const assignment = await waitFor(agreed, 10000, 'every group answered by its assignee')
    // the plugin names itself on the stream
    assert.deepEqual(streams().map(r => r.line), ['GET /v1/assignments/stream?reporter=koishi-drop'])

    // a drop: every connection cut, the next one let through
    const before = streams().length
    const cutAt = performance.now()
    net.cut()
    const back = await waitFor(() => streams()[before], 3000, 'the stream opened again')
    const ms = back.t - cutAt
    await sleep(1500) // three times streamGrace: long enough for the service to take the bots offline, if it would
    console.log(`# stream cut → opened again after ${ms.toFixed(0)} ms; bots taken offline meanwhile: ${offlineLines()}`)
    assert.ok(ms < 400, `the stream was opened again at once (within the 500 ms streamGrace), took ${ms.toFixed(0)} ms`)
    assert.equal(offlineLines(), 0, 'no bot went offline')
    assert.equal(service.count(/bot onebot:200[12] offline/), 0)
    assert.deepEqual(await service.assignments(), assignment, 'nothing moved')
    assert.equal(streams().length, before + 1, 'one reconnection')
    assert.equal(logs.records.filter(r => r.name === 'auto-assign' && /unavailable/.test(r.content)).length, 0, 'a drop that the reconnection mends is not an outage')

    // away for longer than streamGrace: the bots go offline after it, and come back with the stream
    net.state.blocked = true
    const awayAt = performance.now()
    net.cut()
    await waitFor(() => offlineLines() > 0, 3000, 'the service took the bots offline')
    const offlineMs = performance.now() - awayAt
    await waitFor(async () => {
      const a = await service.assignments()
      return groups.every(g => !a[g])
    }, 3000, 'no group assigned: no bot online')
    net.state.blocked = false
    const reopened = performance.now()
    const again = await waitFor(agreed, 5000, 'the bots reported again and every group answered')
    console.log(`# stream kept away → bots offline after ${offlineMs.toFixed(0)} ms; let through again → every group answered after ${(performance.now() - reopened).toFixed(0)} ms`)
    assert.ok(offlineMs >= 450, `not before streamGrace: ${offlineMs.toFixed(0)} ms`)
    assert.ok(groups.every(g => again[g]))
  } finally {
    await koishi?.stop()
    logs.restore()
    await net?.close()
    await service.stop()
  }
})
