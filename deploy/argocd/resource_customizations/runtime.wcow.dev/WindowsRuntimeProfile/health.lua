-- Health of a WindowsRuntimeProfile (runtime.wcow.dev/v1alpha1) for Argo CD.
-- The operator writes kstatus-style conditions: Stalled=True when progress needs a person
-- (invalid spec, handler or RuntimeClass conflict, plan too large, halted rollout, failed or
-- no eligible nodes), Reconciling=True while a change rolls out or nodes prove the handler,
-- and Ready. The reason leads every message.
local function health(status, message)
  return {status = status, message = message}
end

local function said(condition)
  if condition.message ~= nil and condition.message ~= "" then
    return condition.reason .. ": " .. condition.message
  end
  return condition.reason
end

if obj.status == nil or obj.status.conditions == nil then
  return health("Progressing", "Waiting for the wcow operator to reconcile the profile")
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  return health("Progressing", "Waiting for the wcow operator to observe generation "
    .. tostring(generation) .. " (it last observed " .. tostring(observed) .. ")")
end

local conditions = {}
for _, condition in ipairs(obj.status.conditions) do
  conditions[condition.type] = condition
end

local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  return health("Degraded", said(stalled))
end
-- An operator from before Stalled existed: a halted rollout or an invalid spec.
if stalled == nil then
  local rolled = conditions["RolledOut"]
  if rolled ~= nil and rolled.reason == "RolloutHalted" then
    return health("Degraded", said(rolled))
  end
  local valid = conditions["Valid"]
  if valid ~= nil and valid.status == "False" then
    return health("Degraded", said(valid))
  end
end

local reconciling = conditions["Reconciling"]
if reconciling ~= nil and reconciling.status == "True" then
  return health("Progressing", said(reconciling))
end

local ready = conditions["Ready"]
if ready ~= nil and ready.status == "True" then
  return health("Healthy", said(ready))
end
if ready ~= nil then
  return health("Progressing", said(ready))
end
return health("Progressing", "Waiting for the wcow operator to report Ready")
