-- Health of a WindowsRuntimeProfile (runtime.wcow.dev/v1alpha1) for Argo CD.
-- The operator writes kstatus-style conditions: Stalled=True when progress needs a person
-- (invalid spec, handler or RuntimeClass conflict, plan too large, halted rollout, failed or
-- no eligible nodes), Reconciling=True while a change rolls out or nodes prove the handler,
-- and Ready. The reason leads every message.
local hs = {}

local function said(condition)
  if condition.message ~= nil and condition.message ~= "" then
    return condition.reason .. ": " .. condition.message
  end
  return condition.reason
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the wcow operator to reconcile the profile"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the wcow operator to observe generation " .. tostring(generation)
    .. " (it last observed " .. tostring(observed) .. ")"
  return hs
end

local conditions = {}
for _, condition in ipairs(obj.status.conditions) do
  conditions[condition.type] = condition
end

local stalled = conditions["Stalled"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
  return hs
end
-- An operator from before Stalled existed: a halted rollout or an invalid spec.
if stalled == nil then
  local rolled = conditions["RolledOut"]
  if rolled ~= nil and rolled.reason == "RolloutHalted" then
    hs.status = "Degraded"
    hs.message = said(rolled)
    return hs
  end
  local valid = conditions["Valid"]
  if valid ~= nil and valid.status == "False" then
    hs.status = "Degraded"
    hs.message = said(valid)
    return hs
  end
end

local reconciling = conditions["Reconciling"]
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = said(reconciling)
  return hs
end

local ready = conditions["Ready"]
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready)
  return hs
end
if ready ~= nil then
  hs.status = "Progressing"
  hs.message = said(ready)
  return hs
end

hs.status = "Progressing"
hs.message = "Waiting for the wcow operator to report Ready"
return hs
