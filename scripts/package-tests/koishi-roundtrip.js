// One round trip through the Koishi plugin as a user installs it (scripts/test-packages.sh):
// run inside a fresh Koishi project where `npm i koishi-plugin-auto-assign-<v>.tgz` installed
// it, so the plugin is loaded by its package name. A Koishi app on SQLite, with the plugin
// pointed at the packaged service (AUTO_ASSIGN_URL, AUTO_ASSIGN_TOKEN) and two OneBot-like mock
// bots in the same two groups: the service assigns both groups, the plugin writes the
// assignees, and a message in each group is answered by its assignee only.
'use strict'

const assert = require('node:assert/strict')
const { join } = require('node:path')
const { App, Logger } = require('koishi')
const { MockBot } = require('@koishijs/plugin-mock')
const SQLiteDriver = require('@minatojs/driver-sqlite').default
const plugin = require('koishi-plugin-auto-assign')

const endpoint = process.env.AUTO_ASSIGN_URL
const token = process.env.AUTO_ASSIGN_TOKEN
if (!endpoint || !token) throw new Error('set AUTO_ASSIGN_URL and AUTO_ASSIGN_TOKEN')
const BOTS = ['3001', '3002']
const GROUPS = ['300001', '300002']

// MockBot's platform is 'mock'; the service balances 'onebot' (enabledPlatforms' default), and
// the plugin reports each bot's groups from getGuildList.
class OneBotMock extends MockBot {
  constructor(ctx, config) {
    super(ctx, config)
    this.platform = 'onebot'
  }
  dispatch(session) {
    session.event.platform = 'onebot'
    if (session.event.login) session.event.login.platform = 'onebot'
    super.dispatch(session)
  }
  async getGuildList() {
    return { data: GROUPS.map(id => ({ id, name: 'group ' + id })) }
  }
}

async function waitFor(fn, what, timeout = 15000) {
  const start = Date.now()
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() - start > timeout) throw new Error(`timed out after ${timeout} ms waiting for ${what}`)
    await new Promise(r => setTimeout(r, 50))
  }
}

async function assignment() {
  const res = await fetch(endpoint + '/v1/assignments', { headers: { authorization: 'Bearer ' + token } })
  assert.equal(res.status, 200, 'GET /v1/assignments')
  return (await res.json()).onebot ?? {}
}

async function main() {
  // the installed package, not a checkout
  const where = require.resolve('koishi-plugin-auto-assign')
  assert.ok(where.startsWith(join(process.cwd(), 'node_modules') + '/'), where)
  console.log(`koishi round trip: plugin from ${where}`)
  Logger.levels.base = 2 // info: the plugin's "following the auto-assign service at ..."
  const app = new App({ autoAssign: false })
  app.plugin(SQLiteDriver, { path: join(process.cwd(), 'koishi.db') })
  app.middleware(session => 'pong:' + session.selfId)
  const forks = BOTS.map(selfId => app.plugin(OneBotMock, { selfId }))
  app.plugin(plugin, { endpoint, token, reporter: 'koishi-package-test', retryMin: 100, retryMax: 500 })
  await app.start()
  try {
    const bots = BOTS.map(id => app.bots.find(b => b.selfId === id))
    const a = await waitFor(async () => {
      const a = await assignment()
      return GROUPS.every(g => BOTS.includes(a[g])) && a
    }, 'the service to assign both groups')
    const rows = await waitFor(async () => {
      const rows = await app.database.get('channel', { platform: 'onebot' })
      return GROUPS.every(g => rows.some(r => r.id === g && r.assignee === a[g])) && rows
    }, "the plugin to write the service's assignees into Koishi's channel table")
    assert.equal(rows.length, GROUPS.length)
    for (const g of GROUPS) {
      // the same message reaches both bots, as a group message reaches each bot's connection
      const replies = await Promise.all(bots.map(b => b.client('u' + g, g).receive('ping')))
      const answered = bots.filter((_, i) => replies[i].length).map(b => b.selfId)
      assert.deepEqual(answered, [a[g]], `group ${g}: only the assignee answers`)
      console.log(`koishi round trip: group ${g} assigned to ${a[g]}, answered by ${answered.join(', ')} only`)
    }
  } finally {
    for (const fork of forks) fork.dispose() // the bots log out, as support/koishi.js stops them
    await app.stop() // the plugin sends DELETE: its bots go offline on the service at once
  }
}

/** The plugin's clean stop: its DELETE takes its bots offline on the service at once. */
async function botsOffline() {
  await waitFor(async () => {
    const res = await fetch(endpoint + '/v1/bots', { headers: { authorization: 'Bearer ' + token } })
    const bots = await res.json()
    return BOTS.every(id => bots.some(b => b.platform === 'onebot' && b.bot === id && !b.online))
  }, 'the service to see the bots offline after Koishi stopped', 5000)
  console.log(`koishi round trip: Koishi stopped, bots ${BOTS.join(', ')} offline on the service`)
}

main().then(botsOffline).then(() => process.exit(0), (e) => {
  console.error('koishi round trip FAILED:', e)
  process.exit(1)
})
