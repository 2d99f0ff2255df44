// @ts-check
'use strict'
// Koishi with autoAssign: true (its default): Koishi grabs groups it has no row for, the service
// overwrites them; the plugin's insert racing Koishi's own (UNIQUE) is retried.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { mkdtempSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const plugin = require('../src')
const { createKoishi, captureLogs, waitFor, sleep } = require('./support/koishi')
const { Service, freePort, TOKEN } = require('./support/service')

const G = (/** @type {number} */ i) => String(200000 + i)
const range = (/** @type {number} */ a, /** @type {number} */ b) => Array.from({ length: b - a + 1 }, (_, i) => G(a + i))
const GROUPS = range(1, 12)

/** @type {string} */ let dir
/** @type {Service} */ let service
/** @type {Awaited<ReturnType<typeof createKoishi>>} */ let koishi
/** @type {ReturnType<typeof captureLogs>} */ let logs

/** @param {string[]} groups */
async function agreement(groups) {
  const assignment = await service.assignments()
  const answers = await koishi.answers(groups)
  for (const g of groups) {
    const want = assignment[g] ? [assignment[g]] : []
    if (JSON.stringify(answers[g]) !== JSON.stringify(want)) return null
  }
  return { assignment, answers }
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-'))
  service = new Service({ dir, port: await freePort() })
  logs = captureLogs()
  // the service is not started yet: Koishi runs on its own first
  koishi = await createKoishi({
    dir,
    appConfig: { autoAssign: true },
    bots: [
      { selfId: '1001', guilds: GROUPS },
      { selfId: '1002', guilds: range(1, 8) },
      { selfId: '1003', guilds: range(5, 12) },
    ],
    plugin,
    pluginConfig: {
      endpoint: service.endpoint, token: TOKEN, reporter: 'koishi-auto', heartbeatInterval: 1000,
      retryMin: 100, retryMax: 500, requestTimeout: 2000,
    },
  })
})

after(async () => {
  await koishi?.stop()
  logs?.restore()
  await service?.stop()
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test('Koishi picks first (service down), then the service overwrites every row', async () => {
  const own = await koishi.answers(GROUPS)
  for (const g of GROUPS) assert.equal(own[g].length, 1, `Koishi's autoAssign: one answer in ${g}`)
  const picks = Object.fromEntries((await koishi.rows()).map(r => [r.id, r.assignee]))
  await service.start()
  const r = await waitFor(async () => {
    const a = await service.assignments()
    return Object.keys(a).length === GROUPS.length && (await agreement(GROUPS))
  }, 8000, 'the service assignment applied')
  const changed = GROUPS.filter(g => picks[g] !== r.assignment[g])
  console.log(`# rows Koishi had picked: ${JSON.stringify(Object.values(picks))}; ${changed.length} overwritten by the service`)
  assert.ok(changed.length > 0, 'the service moved some of Koishi\'s picks')
  const rows = await koishi.rows()
  assert.deepEqual(Object.fromEntries(rows.map(x => [x.id, x.assignee])), r.assignment)
})

test("Koishi's autoAssign INSERT inside the plugin's write: UNIQUE is retried, the service's assignee wins", async () => {
  // 1003 joins new groups (reported to the service, which assigns them to 1003). 1001 is in
  // them too but does not say so, and gets a first message at the exact moment the plugin reads
  // the row before its upsert (its SELECT is on Koishi's SQL log): Koishi's autoAssign inserts
  // the row for 1001 between the plugin's read and its insert.
  const fresh = range(31, 35)
  const retries = () => logs.records.filter(x => x.name === 'auto-assign' && /inserted meanwhile/.test(x.content)).length
  const before = retries()
  /** @type {Set<string>} */
  const fired = new Set()
  logs.tap((r) => {
    const m = r.name === 'sqlite' && /FROM `channel`.* in \('(\d+)'\)/.exec(String(r.content))
    if (!m || !fresh.includes(m[1]) || fired.has(m[1])) return
    fired.add(m[1])
    koishi.bot('1001').client('first-' + m[1], m[1]).receive('ping')
  })
  try {
    for (const g of fresh) {
      koishi.bot('1001').guilds.set(g, { id: g, name: g }) // silently: no event
      koishi.bot('1003').joinGuild(g)
      await waitFor(async () => (await koishi.rows()).some(x => x.id === g && x.assignee === '1003'), 3000, `${g} written`)
    }
  } finally {
    logs.tap(null)
  }
  const r = await waitFor(async () => {
    const a = await service.assignments()
    return fresh.every(g => a[g] === '1003') && (await agreement(fresh))
  }, 5000, 'every new group answered by 1003')
  console.log(`# first messages fired inside the plugin's write: ${fired.size}; UNIQUE conflicts retried: ${retries() - before}`)
  assert.ok(retries() > before, 'the race happened and was retried')
  const rows = Object.fromEntries((await koishi.rows()).map(x => [x.id, x.assignee]))
  for (const g of fresh) assert.equal(rows[g], r.assignment[g])
})

test('a wrong token: one warning naming the token, not one per retry', async () => {
  const lines = () => logs.records.filter(x => x.name === 'auto-assign' && /HTTP 401/.test(x.content))
  const before = lines().length
  koishi.pluginFork.dispose() // one instance per Koishi
  const fork = koishi.app.plugin(plugin, {
    endpoint: service.endpoint, token: 'wrong', reporter: 'koishi-wrong-token',
    heartbeatInterval: 200, retryMin: 50, retryMax: 200, requestTimeout: 2000,
  })
  await sleep(1500) // about ten retries of the stream and of the reporter each
  fork.dispose()
  const got = lines().slice(before)
  assert.equal(got.length, 1, JSON.stringify(got.map(x => x.content)))
  assert.match(got[0].content, /token/)
})
