--[[
gpuquota's optional job_submit.lua (JobSubmitPlugins=lua; install as job_submit.lua beside
slurm.conf). It forces a GPU type on GPU requests that name none: Slurm enforces a typed
limit (GrpTRES=gres/gpu:h100=4, which gpuquota writes per team) only for requests of that
type, so an untyped `--gres=gpu:2` would escape it (a documented Slurm limitation).

Requests for a named type are left alone. Jobs reach their team's reservation without
this script: gpuquota creates node reservations with Flags=MAGNETIC, which draws the jobs of
the reservation's accounts into it.

Set DEFAULT_GPU_TYPE, or PARTITION_GPU_TYPE for partitions of different GPUs.
--]]

DEFAULT_GPU_TYPE = "h100"
PARTITION_GPU_TYPE = {}  -- e.g. { a100 = "a100", l4 = "l4" }

local function gpu_type_for(job_desc)
   local partition = job_desc.partition
   if partition ~= nil and PARTITION_GPU_TYPE[partition] ~= nil then
      return PARTITION_GPU_TYPE[partition]
   end
   return DEFAULT_GPU_TYPE
end

-- "gres:gpu:2,gres:nic:1" -> "gres:gpu:h100:2,gres:nic:1" (typed entries untouched)
local function typed(tres, gpu_type)
   if tres == nil or tres == "" then
      return tres, false
   end
   local changed = false
   local out = {}
   for item in string.gmatch(tres, "[^,]+") do
      local count = string.match(item, "^gres[:/]gpu[:=](%d+)$")
      if count == nil and (item == "gres:gpu" or item == "gres/gpu") then
         count = "1"
      end
      if count ~= nil then
         item = "gres:gpu:" .. gpu_type .. ":" .. count
         changed = true
      end
      table.insert(out, item)
   end
   return table.concat(out, ","), changed
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local gpu_type = gpu_type_for(job_desc)
   for _, field in ipairs({"tres_per_node", "tres_per_job", "tres_per_socket",
                           "tres_per_task"}) do
      local value, changed = typed(job_desc[field], gpu_type)
      if changed then
         job_desc[field] = value
         slurm.log_info("gpuquota: %s of uid %u typed as %s", field, submit_uid, value)
      end
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm_job_submit(job_desc, part_list, modify_uid)
end

slurm.log_info("gpuquota job_submit.lua loaded (default GPU type %s)", DEFAULT_GPU_TYPE)
return slurm.SUCCESS
